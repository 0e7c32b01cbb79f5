"""gradci as a GitHub App end to end: signed webhooks that name the App's installation → runs on a
real worker (PostgreSQL, Redis) → a check run per run on a fake GitHub that checks credentials as
GitHub does (the App's JWT, verified with its public key, for an installation token; that token on
every repository call). The check run is in progress, then completed with an annotation at the line
of each failing scenario's Scenario(...) call; GitHub's Re-run starts a rerun."""
from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy import select

from gradci._testing.databases import emptied, flushed
from gradci._testing.processes import wait_for
from gradci._testing.repos import commit_all, init_repository
from gradci._testing.service import GRADCI, Service, running_service
from gradci.services.db.models import Repository
from gradci.services.db.session import session_scope
from gradci.services.reports.markdown import MARKER
from tests.support import webhook_client
from tests.support.checkouts import gradci_toml
from tests.support.fake_github import FakeGitHub
from tests.support.payloads import pull_request

pytestmark = pytest.mark.integration

FULL_NAME = "Codertocat/Hello-World"
APP_ID, INSTALLATION = 31337, 4242
STRANGER, STRANGERS_INSTALLATION = "mallory/Hello-World", 6666  # installed the App; the operator never registered it
PUBLIC_URL = "http://gradci.example"
SECRET = webhook_client.SECRET


def deliver(url: str, event: str, body: dict, delivery: str | None = None) -> httpx.Response:
    return webhook_client.deliver_over_http(url, event, body, delivery, SECRET)

MODULE = '''
import numpy as np
from gradci import Scenario, namespace

def poly(x):
    return namespace(x).sum(x ** 3 - 2 * x)

def scenarios():
    x = np.array([0.3, -0.2, 0.7])
    return [
        Scenario("a/poly", "gradient", poly, x{reference}),
        Scenario("b/poly", "gradient", poly, x),
    ]
'''


def commit(repo: Path, message: str, reference: str = "") -> str:
    (repo / "grad_scenarios.py").write_text(MODULE.format(reference=reference))
    return commit_all(repo, message)


def line_of(text: str, needle: str) -> int:
    return next(number for number, line in enumerate(text.splitlines(), 1) if needle in line)


@pytest.fixture(scope="module")
def mirror(tmp_path_factory) -> tuple[Path, list[str]]:
    root = tmp_path_factory.mktemp("mirrors")
    repo = init_repository(root / "Codertocat" / "Hello-World.git", "master")
    (repo / "gradci.toml").write_text(gradci_toml("grad_scenarios", backends=["torch-rev"], dtypes=["float64"]))
    return root, [commit(repo, "base: all pass"), commit(repo, "break a", ", reference=np.zeros(3)")]


@pytest.fixture(scope="module")
def app_github() -> Iterator[tuple[FakeGitHub, str]]:
    with FakeGitHub() as fake:
        yield fake, fake.as_app(APP_ID, {INSTALLATION: {FULL_NAME}})


@pytest.fixture(scope="module")
def app_service(postgres_database, redis_database, mirror, app_github, tmp_path_factory) -> Iterator[Service]:
    """The service in App mode: the App's id, and its private key in a file of its own; FULL_NAME
    registered (GRADCI_ALLOWED_REPOS), as an App runs only what its operator named."""
    fake, private_key = app_github
    key_file = tmp_path_factory.mktemp("key") / "app.pem"
    key_file.write_text(private_key)
    key_file.chmod(0o600)
    with running_service(emptied(postgres_database), flushed(redis_database), tmp_path_factory.mktemp("work"),
                         tmp_path_factory.mktemp("logs"), concurrency=1, github_webhook_secret=SECRET,
                         github_app_id=str(APP_ID), github_app_private_key_file=str(key_file),
                         github_api_url=fake.url, public_url=PUBLIC_URL, worker_heartbeat_s="1", allowed_repos=FULL_NAME,
                         clone_url_template=f"file://{mirror[0]}/{{full_name}}.git") as service:
        try:
            yield service
        finally:
            print(service.log("gradci.worker.log")[-4000:])


def installed(body: dict) -> dict:
    return {**body, "installation": {"id": INSTALLATION}}


def completed(fake: FakeGitHub, sha: str, count: int = 1) -> list[dict] | None:
    runs = [run for run in fake.check_runs_for(sha) if run.get("status") == "completed"]
    return runs if len(runs) >= count else None


def test_a_pull_request_reports_as_a_check_run_with_annotations_and_reruns(app_service, mirror, app_github):
    fake, _ = app_github
    server = app_service.url
    c0, c1 = mirror[1]
    # A webhook that names no installation of the App is refused, and starts nothing.
    anonymous = pull_request("opened", c1, c0)
    del anonymous["installation"]
    refused = deliver(server, "pull_request", anonymous)
    assert refused.status_code == 403 and "names no installation" in refused.json()["detail"]
    assert httpx.get(f"{server}/api/runs").json()["items"] == []

    assert deliver(server, "pull_request", installed(pull_request("opened", c1, c0))).status_code == 202
    done = wait_for(lambda: completed(fake, c1), "C1's completed check run", timeout_s=180)
    (check,) = done
    assert check["name"] == "gradci" and check["conclusion"] == "failure"
    assert check["details_url"].startswith(f"{PUBLIC_URL}/runs/")
    assert check["output"]["summary"].startswith(MARKER)  # the report, as the comment has it
    source = MODULE.format(reference=", reference=np.zeros(3)")
    (annotation,) = check["annotations"]  # b/poly passes: only a/poly is annotated
    assert annotation["path"] == "grad_scenarios.py" and annotation["annotation_level"] == "failure"
    assert annotation["start_line"] == line_of(source, '"a/poly"')
    assert annotation["title"] == "a/poly: 1 failing cell"
    # The check run was created in progress before it completed; the base run got one too.
    creations = [c for c in fake.calls if c["method"] == "POST" and c["path"].endswith("/check-runs")]
    assert any(c["body"]["head_sha"] == c1 and c["body"]["status"] == "in_progress" for c in creations)
    base = wait_for(lambda: completed(fake, c0), "the base run's completed check run", timeout_s=60)
    assert base[0]["conclusion"] == "success"
    # Every repository call carried an installation token the fake issued; the comment stays.
    (comment,) = wait_for(lambda: fake.comments_on(FULL_NAME, 2), "the pull request's comment", timeout_s=60)
    assert comment["body"].startswith(MARKER)
    exchanges = [c for c in fake.calls if c["path"].endswith("/access_tokens")]
    assert exchanges and all(c["answered"] == "ok" for c in exchanges)
    assert not [c for c in fake.calls if c["answered"] in (401, 403)]
    assert not [s for s in fake.statuses if s["sha"] == c1]  # App mode: a check run, not commit statuses

    # Re-run: a new run of the same commit, listed under its sha, reported as a new check run.
    run_id = int(check["external_id"])
    again = deliver(server, "check_run", installed({
        "action": "rerequested", "check_run": {"id": check["id"], "external_id": str(run_id), "head_sha": c1},
        "repository": {"full_name": FULL_NAME, "clone_url": f"https://github.com/{FULL_NAME}.git"}}))
    assert again.status_code == 202 and again.json()["accepted"] == "rerun"
    wait_for(lambda: completed(fake, c1, 2), "the rerun's completed check run", timeout_s=180)
    runs = httpx.get(f"{server}/api/runs", params={"sha": c1}).json()["items"]
    rerun = next(run for run in runs if run["trigger"] == "rerun")
    assert rerun["parent_run_id"] == run_id and rerun["status"] == "failed"

    # Installation events: the repository removed from the installation, then added back.
    def installation_of_repository() -> int | None:
        with session_scope(app_service.database_url, readonly=True) as session:
            return session.scalars(select(Repository.github_installation_id)
                                   .where(Repository.full_name == FULL_NAME)).one()

    assert installation_of_repository() == INSTALLATION
    removed = deliver(server, "installation_repositories", {
        "action": "removed", "installation": {"id": INSTALLATION}, "repositories_added": [],
        "repositories_removed": [{"full_name": FULL_NAME}]})
    assert removed.status_code == 202 and removed.json()["accepted"] == "installation"
    wait_for(lambda: installation_of_repository() is None, "the repository's installation forgotten", timeout_s=30)
    deliver(server, "installation", {"action": "created", "installation": {"id": INSTALLATION},
                                     "repositories": [{"full_name": FULL_NAME}]})
    wait_for(lambda: installation_of_repository() == INSTALLATION, "the installation recorded again", timeout_s=30)


def test_a_strangers_installation_gets_a_refusal_on_its_check_run_and_nothing_run(app_service, mirror, app_github):
    """Anyone can install a public App, and its webhooks come signed with the App's secret: a
    repository its operator did not register gets a check run that says so, and no run."""
    fake, _ = app_github
    fake.installations[STRANGERS_INSTALLATION] = {STRANGER}
    c0, c1 = mirror[1]
    before = httpx.get(f"{app_service.url}/api/runs").json()["items"]
    body = pull_request("opened", c1, c0)
    body["repository"]["full_name"] = body["pull_request"]["base"]["repo"]["full_name"] = STRANGER
    body["pull_request"]["head"]["repo"]["full_name"] = STRANGER  # a branch of its own, not a fork's
    body["installation"] = {"id": STRANGERS_INSTALLATION}
    answer = deliver(app_service.url, "pull_request", body)
    assert answer.status_code == 202 and answer.json()["accepted"] == "unregistered", answer.text
    refusal = wait_for(lambda: [run for run in fake.check_runs.values() if run["repo"] == STRANGER],
                       "the refusal on the stranger's check run", timeout_s=60)
    (check,) = refusal
    assert (check["head_sha"], check["status"], check["conclusion"]) == (c1, "completed", "action_required")
    assert "not registered" in check["output"]["title"] and "Nothing was run" in check["output"]["summary"]
    assert httpx.get(f"{app_service.url}/api/runs").json()["items"] == before
    # Once its operator registers it (any case: GitHub's names ignore it), the same pull request runs.
    added = subprocess.run([*GRADCI, "repos", "add", STRANGER.lower()], env=app_service.env, capture_output=True,
                           text=True, timeout=120)
    assert added.returncode == 0 and "registered" in added.stdout, added.stderr
    again = deliver(app_service.url, "pull_request", body)
    assert again.status_code == 202 and again.json()["accepted"] == "run_pr", again.text
    runs = wait_for(lambda: [run for run in httpx.get(f"{app_service.url}/api/runs").json()["items"]
                             if run["id"] not in {old["id"] for old in before}], "the registered repository's runs")
    assert c1 in [run["head_sha"] for run in runs], runs  # with its base's, to compare with
    for run in runs:  # their clones fail (no mirror of the stranger's here): what matters is that they ran
        app_service.wait_finished(run["id"])
