"""Who reads what, tried as an attacker would: anonymously, signed in as someone GitHub does not let
read the repository, and with a read token of another repository — through every route of the app
(the OpenAPI schema's and the dashboard's: a route added without an access check fails here). Then
those who may: a reader GitHub lets in, a read token of the repository, an operator.

The service runs as deployed (``read_access="public"``) on PostgreSQL, and GitHub is the fake one:
sign-in through its OAuth web flow, and each user's view of each repository from its per-user answers."""
from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pytest
from fastapi.routing import APIRoute
from fastapi.testclient import TestClient
from sqlalchemy import select

from gradci.services.access.read_tokens import create_read_token
from gradci.services.api.access import operator_access, read_access
from gradci.services.api.deps import require_write_token
from gradci.services.api.login import local_path
from gradci.services.db.models import Job, Result, Run, ScenarioCatalogEntry
from gradci.services.db.results import upsert_results
from gradci.services.db.rules import reach_rows, record_lines, record_reaches, record_rules
from gradci.services.db.runs import create_run, get_or_create_repository
from gradci.services.db.session import session_scope
from gradci.services.settings import Settings, get_settings
from gradci.web.app import create_app
from tests.support.cells import synthetic_cell
from tests.support.fake_github import FakeGitHub
from tests.support.sign_in import sign_in

pytestmark = pytest.mark.integration

TOKEN = "operator-token"
SECRET_SHA = "5ec2e7" + "0" * 34
SCENARIO = "secretops/fused_attention_grad"
MESSAGE = "bucket s3://acme-internal-weights on build-07.corp.acme.example"
DEFINED_IN = "kernels/fused_attention_scenarios.py"
RULE, RULE_FILE = "FusedAttentionSecretBackward", "kernels/fused_attention_rules.py"
# What nobody but the repository's readers may see, in any answer.
MARKERS = ("acme/secret", SECRET_SHA, SECRET_SHA[:7], SCENARIO, "acme-internal-weights", DEFINED_IN, RULE,
           RULE_FILE)

# Routes that show nothing of any repository: the schema and its pages, health, assets, signing in.
PUBLIC = {("GET", "/openapi.json"), ("GET", "/docs"), ("GET", "/docs/oauth2-redirect"), ("GET", "/redoc"),
          ("GET", "/api/health"), ("GET", "/static/{name}"), ("GET", "/login"), ("GET", "/login/callback"),
          ("POST", "/logout")}
# Writes with credentials of their own: the webhook's signature and the upload's token.
OWN_CREDENTIALS = {("POST", "/webhooks/github"), ("POST", "/api/uploads")}


@pytest.fixture
def github() -> Iterator[FakeGitHub]:
    with FakeGitHub() as fake:
        fake.add_oauth_app()
        fake.add_repository("acme/secret", private=True, readers=("alice",), writers=("wanda",))
        fake.add_repository("acme/open", private=False)
        fake.add_user("mallory")
        fake.add_user("olga")
        yield fake


def settings_for(github: FakeGitHub, database_url: str, redis_url: str, tmp_path: Path, **changes: Any) -> Settings:
    client_id, client_secret = github.oauth_client or ("", "")
    return Settings(**{"database_url": database_url, "broker_url": redis_url, "api_token": TOKEN,
                       "workdir": tmp_path / "work", "github_api_url": github.url, "github_web_url": github.url,
                       "github_oauth_client_id": client_id, "github_oauth_client_secret": client_secret,
                       "operators": ["olga"], **changes})


@pytest.fixture
def settings(clean_environment: None, github: FakeGitHub, postgres_url: str, redis_url: str,
             tmp_path: Path) -> Settings:
    return settings_for(github, postgres_url, redis_url, tmp_path)


@pytest.fixture
def seeded(settings: Settings) -> dict[str, int]:
    """A private repository's finished push run and running pull-request run (cells, a job, where its
    scenario is defined), a public repository's run and a run of the built-in library."""
    cell = {**synthetic_cell(0, status="fail"), "scenario": SCENARIO, "message": MESSAGE}
    with session_scope(settings.database_url) as session:
        secret = get_or_create_repository(session, "https://github.com/acme/secret.git", "acme/secret")
        public = get_or_create_repository(session, "https://github.com/acme/open.git", "acme/open")
        base = create_run(session, repository=secret, head_sha="b" * 40, trigger="push")
        base.status = "passed"
        run = create_run(session, repository=secret, head_sha=SECRET_SHA, base_sha="b" * 40, pr_number=7)
        run.status = "running"
        open_run = create_run(session, repository=public, head_sha="0" * 40)
        library = create_run(session)
        session.flush()
        job = Job(run_id=run.id, backend="jax-rev", device="cpu", queue="cpu", status="running", worker="cpu-1@box")
        session.add_all([job, ScenarioCatalogEntry(run_id=run.id, name=SCENARIO, operator="grad", file=DEFINED_IN,
                                                   line=12)])
        session.flush()
        ids = {"run": run.id, "base": base.id, "open": open_run.id, "library": library.id, "job": job.id,
               "repository": secret.id}
    with session_scope(settings.database_url) as session:
        upsert_results(session, ids["base"], [cell])
        upsert_results(session, ids["run"], [{**cell, "job_id": ids["job"]}])
        # Its rule coverage: a rule, the cell that ran its backward, and the lines it reached.
        method = {"name": "backward", "file": RULE_FILE, "first_line": 3, "lines": [4, 5], "digest": "d",
                  "source": "    @staticmethod\n    def backward(ctx, g):\n        return g\n"}
        record_rules(session, ids["run"], [{"id": f"{RULE_FILE}::{RULE}", "kind": "torch.autograd.Function",
                                            "name": RULE, "file": RULE_FILE, "methods": [method]}])
        record_reaches(session, reach_rows(ids["run"], cell, {"rules": {f"{RULE_FILE}::{RULE}": ["backward"]}}))
        record_lines(session, ids["run"], f"job {ids['job']}", {RULE_FILE: [4]})
    with session_scope(settings.database_url, readonly=True) as session:
        ids["cell"] = session.scalar(select(Result.id).where(Result.run_id == ids["run"]))
    return ids


def every_route(app: Any) -> list[Any]:
    """The app's routes, those of included routers too."""
    found = []
    for route in app.routes:
        inner = getattr(route, "original_router", None)
        found += every_route(inner) if inner is not None else [route]
    return found


def dependencies_of(route: APIRoute) -> set[Any]:
    calls, pending = set(), [route.dependant]
    while pending:
        dependant = pending.pop()
        calls.add(dependant.call)
        pending += dependant.dependencies
    return calls


def concrete(path: str, ids: dict[str, int]) -> str:
    """The route's path naming the private repository's run, cell, job, scenario and badge."""
    return (path.replace("{run_id}", str(ids["run"])).replace("{before_id}", str(ids["base"]))
            .replace("{after_id}", str(ids["run"])).replace("{cell_id}", str(ids["cell"]))
            .replace("{job_id}", str(ids["job"])).replace("{owner}", "acme").replace("{repo}", "secret")
            .replace("{name:path}", SCENARIO).replace("{name}", "dashboard.css"))


def read_paths(app: Any, ids: dict[str, int]) -> list[str]:
    paths = [concrete(route.path, ids) for route in every_route(app)
             if "GET" in route.methods and (route.path not in ("/login", "/login/callback"))]
    # Lists, filtered and not, and the private repository's scenario history.
    return [*paths, "/?repo=acme/secret", "/api/runs?repo=acme/secret", f"/api/runs?sha={SECRET_SHA[:7]}",
            "/api/runs?pr=7", f"/scenarios/{SCENARIO}?repository={ids['repository']}",
            f"/api/runs/{ids['run']}/report?format=markdown", f"/runs/{ids['run']}/rules/file?path={RULE_FILE}"]


def leaks(client: TestClient, paths: list[str], **headers: str) -> dict[str, list[str]]:
    """The markers each answer shows, but those its request named itself (a page may echo a filter)."""
    found = {}
    for path in paths:
        response = client.get(path, headers={"accept": "text/html", **headers})
        shown = [marker for marker in MARKERS if marker not in unquote(path)
                 and (marker in response.text or marker in str(response.headers))]
        if shown:
            found[path] = shown
    return found


def test_every_route_checks_who_reads(settings: Settings) -> None:
    app = create_app(settings)
    unchecked = []
    for route in every_route(app):
        for method in sorted(getattr(route, "methods", set()) - {"HEAD"}):
            if (method, route.path) in PUBLIC | OWN_CREDENTIALS:
                continue
            calls = dependencies_of(route) if isinstance(route, APIRoute) else set()
            if not calls & {read_access, operator_access, require_write_token}:
                unchecked.append(f"{method} {route.path}")
    assert unchecked == [], "routes that decide nothing about who asks (add ReadAccess, or list them as public)"


def test_nobody_reads_a_private_repository_anonymously_or_as_a_stranger(settings: Settings, github: FakeGitHub,
                                                                        seeded: dict[str, int]) -> None:
    app = create_app(settings)
    paths = read_paths(app, seeded)
    assert len(paths) > 20
    with TestClient(app) as anonymous:
        assert leaks(anonymous, paths) == {}
        assert anonymous.get(f"/api/runs/{seeded['run']}").status_code == 404  # as if there were no such run
        assert anonymous.get("/api/workers").status_code == 401 and anonymous.get("/metrics").status_code == 401
        listed = {run["id"] for run in anonymous.get("/api/runs").json()["items"]}
        assert listed == {seeded["open"], seeded["library"]}  # public repositories and the library stay open
        page = anonymous.get(f"/runs/{seeded['run']}", headers={"accept": "text/html"})
        assert page.status_code == 404 and 'id="sign-in-to-see"' in page.text
        for rules_page in (f"/runs/{seeded['run']}/rules", f"/runs/{seeded['run']}/rules/file?path={RULE_FILE}"):
            assert anonymous.get(rules_page, headers={"accept": "text/html"}).status_code == 404
    with TestClient(app) as mallory:
        assert sign_in(mallory, github, "mallory").status_code == 303
        assert leaks(mallory, paths) == {}
        assert mallory.get(f"/runs/{seeded['run']}/rules").status_code == 404
        assert mallory.get("/api/workers").status_code == 403
    with session_scope(settings.database_url) as session:
        _, other_token = create_read_token(session, ["acme/open"])
    with TestClient(app) as program:
        assert leaks(program, paths, authorization=f"Bearer {other_token}") == {}
        assert leaks(program, [f"/badge/acme/secret.svg?token={other_token}"]) == {}
        assert program.get("/api/runs", headers={"authorization": "Bearer gradci_read_guess"}).status_code == 401


def test_those_github_lets_read_see_it(settings: Settings, github: FakeGitHub, seeded: dict[str, int]) -> None:
    app = create_app(settings)
    with TestClient(app) as alice:
        assert sign_in(alice, github, "alice", next_path=f"/runs/{seeded['run']}").headers["location"] == \
            f"/runs/{seeded['run']}"
        page = alice.get(f"/runs/{seeded['run']}")
        assert page.status_code == 200 and SCENARIO in page.text and 'id="signed-in">alice<' in page.text
        assert 'id="cancel-run"' not in page.text  # reading is not pushing
        assert alice.get(f"/api/runs/{seeded['run']}/results").json()["items"][0]["message"] == MESSAGE
        history = alice.get(f"/scenarios/{SCENARIO}?repository={seeded['repository']}")
        assert history.status_code == 200 and SECRET_SHA[:7] in history.text
        rules = alice.get(f"/runs/{seeded['run']}/rules")
        assert rules.status_code == 200 and RULE in rules.text and RULE_FILE in rules.text
        lines = alice.get(f"/runs/{seeded['run']}/rules/file", params={"path": RULE_FILE})
        assert lines.status_code == 200 and '<span class="reached" data-line="4">' in lines.text
        assert {run["id"] for run in alice.get("/api/runs").json()["items"]} == {
            seeded["run"], seeded["base"], seeded["open"], seeded["library"]}
        assert alice.get("/workers").status_code == 403  # workers are the operator's
    with session_scope(settings.database_url) as session:
        _, token = create_read_token(session, ["acme/secret"])
    with TestClient(app) as program:
        assert program.get(f"/api/runs/{seeded['run']}/junit.xml",
                           headers={"authorization": f"Bearer {token}"}).text.count(SCENARIO) >= 1
        assert "100.0%" not in program.get("/badge/acme/secret.svg").text  # no token: the unknown badge
        assert "unknown" in program.get("/badge/acme/secret.svg").text
        assert "unknown" not in program.get(f"/badge/acme/secret.svg?token={token}").text
    with TestClient(app) as olga:
        sign_in(olga, github, "olga")
        assert olga.get("/workers").status_code == 200 and olga.get("/metrics").status_code == 200
        assert olga.get(f"/runs/{seeded['run']}").status_code == 200  # an operator sees every repository
    with TestClient(app) as admin:
        assert admin.get("/api/workers", headers={"authorization": f"Bearer {TOKEN}"}).status_code == 200


def test_githubs_answer_is_kept_for_minutes_not_forever(github: FakeGitHub, postgres_url: str, redis_url: str,
                                                        tmp_path: Path, clean_environment: None,
                                                        seeded: dict[str, int]) -> None:
    app = create_app(settings_for(github, postgres_url, redis_url, tmp_path, github_access_ttl_s=1.0))
    with TestClient(app) as alice:
        sign_in(alice, github, "alice")
        assert alice.get(f"/api/runs/{seeded['run']}").status_code == 200
        asked = len(github.repository_lookups)
        github.repositories["acme/secret"].readers.discard("alice")  # alice leaves the team
        assert alice.get(f"/api/runs/{seeded['run']}").status_code == 200  # the kept answer
        assert len(github.repository_lookups) == asked  # GitHub was not asked again within the time
        time.sleep(1.1)
        assert alice.get(f"/api/runs/{seeded['run']}").status_code == 404


def test_with_login_required_even_public_repositories_need_a_credential(github: FakeGitHub, postgres_url: str,
                                                                        redis_url: str, tmp_path: Path,
                                                                        clean_environment: None,
                                                                        seeded: dict[str, int]) -> None:
    app = create_app(settings_for(github, postgres_url, redis_url, tmp_path, read_access="login"))
    with TestClient(app) as anonymous:
        assert anonymous.get("/api/runs").json()["items"] == []
        assert anonymous.get(f"/api/runs/{seeded['open']}").status_code == 404
        sign_in(anonymous, github, "mallory")
        assert {run["id"] for run in anonymous.get("/api/runs").json()["items"]} == {seeded["open"], seeded["library"]}


# --- writes from the dashboard: CSRF ----------------------------------------------------------------


def test_a_cross_site_cancel_is_refused(settings: Settings, github: FakeGitHub, seeded: dict[str, int]) -> None:
    app = create_app(settings)
    cancel = f"/runs/{seeded['run']}/cancel"
    with TestClient(app) as wanda:
        sign_in(wanda, github, "wanda")
        page = wanda.get(f"/runs/{seeded['run']}").text
        assert 'id="cancel-run"' in page  # wanda may push: the page offers to cancel
        csrf = page.split('name="csrf" value="')[1].split('"')[0]
        # Another site's form: no token, a token of its own, or the right one from another origin.
        assert wanda.post(cancel, data={}).status_code == 403
        assert wanda.post(cancel, data={"csrf": "forged"}).status_code == 403
        assert wanda.post(cancel, data={"csrf": csrf}, headers={"origin": "https://evil.example"}).status_code == 403
        assert wanda.post(cancel, data={"csrf": csrf}, headers={"sec-fetch-site": "cross-site"}).status_code == 403
        with session_scope(settings.database_url, readonly=True) as session:
            assert not session.get(Run, seeded["run"]).cancel_requested
        done = wanda.post(cancel, data={"csrf": csrf}, headers={"origin": str(wanda.base_url)},
                          follow_redirects=False)
        assert done.status_code == 303
    with session_scope(settings.database_url, readonly=True) as session:
        assert session.get(Run, seeded["run"]).cancel_requested  # its running job stops at its next cell
    with TestClient(app) as alice:  # a reader who may not push
        sign_in(alice, github, "alice")
        page = alice.get(f"/runs/{seeded['open']}").text
        csrf = page.split('name="csrf" value="')[1].split('"')[0]  # the sign-out form's
        assert alice.post(f"/runs/{seeded['open']}/cancel", data={"csrf": csrf}).status_code == 403


def test_without_an_api_token_a_cross_site_write_is_refused(github: FakeGitHub, postgres_url: str, redis_url: str,
                                                            tmp_path: Path, clean_environment: None,
                                                            seeded: dict[str, int]) -> None:
    """``gradci api --no-auth`` on loopback: a page of any site could post to it."""
    app = create_app(settings_for(github, postgres_url, redis_url, tmp_path, api_token=None, read_access="local"))
    with TestClient(app, base_url="http://127.0.0.1") as client:
        cancel = f"/api/runs/{seeded['run']}/cancel"
        assert client.post(cancel, headers={"origin": "https://evil.example"}).status_code == 403
        assert client.post(cancel, headers={"sec-fetch-site": "cross-site"}).status_code == 403
        assert client.post(cancel).status_code == 200  # a program (curl, gradci) sends neither


def test_gradci_tokens_create_read_makes_a_token_that_reads_its_repositories(
        settings: Settings, seeded: dict[str, int], monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    from gradci.cli.commands import app as cli

    monkeypatch.setenv("GRADCI_DATABASE_URL", settings.database_url)
    get_settings.cache_clear()
    made = CliRunner().invoke(cli, ["tokens", "create", "--read", "acme/secret", "acme/open"])
    assert made.exit_code == 0, made.output
    token = made.output.strip().splitlines()[-1]
    with TestClient(create_app(settings)) as program:
        assert program.get(f"/api/runs/{seeded['run']}", headers={"authorization": f"Bearer {token}"}).json()[
            "head_sha"] == SECRET_SHA
        token_id = made.output.split("read token ")[1].split()[0]
        assert CliRunner().invoke(cli, ["tokens", "revoke", "--read", token_id]).exit_code == 0
        assert program.get(f"/api/runs/{seeded['run']}", headers={"authorization": f"Bearer {token}"}).status_code == 401


@pytest.mark.parametrize("target", ["//evil.example/x", "/\\evil.example", "https://evil.example/", "/\r\nSet-Cookie:x",
                                    "", None])
def test_signing_in_returns_only_to_a_page_of_this_site(target: str | None) -> None:
    assert local_path(target) == "/"
    assert local_path("/runs/7?page=2") == "/runs/7?page=2"
