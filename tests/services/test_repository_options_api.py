"""A repository's options over the REST API (``/api/repos/{owner}/{repo}/options``), as an attacker and
as the operator would use it: a real ``gradci api`` process over HTTP, on PostgreSQL, with the fake
GitHub answering who may read what (``read_access="public"``, as deployed).

Options change what a repository's runs do (detection power re-runs every cell that reaches a rule,
many times): only the operator's token changes them, as every other write of the API; those who may
read a repository's runs read its options, and anyone else is told it does not exist.
"""
from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from gradci._testing.databases import emptied
from gradci._testing.processes import service_env
from gradci._testing.served_app import serving_api
from gradci.services.access.read_tokens import create_read_token
from gradci.services.db.repository_options import power_repositories, set_power
from gradci.services.db.runs import get_or_create_repository
from gradci.services.db.session import session_scope
from tests.support.fake_github import FakeGitHub

pytestmark = pytest.mark.integration

TOKEN = "operator-token"
ADMIN = {"authorization": f"Bearer {TOKEN}"}
KNOWN = ("acme/a", "acme/b", "acme/open")


@pytest.fixture(scope="module")
def github() -> Iterator[FakeGitHub]:
    with FakeGitHub() as fake:
        fake.add_repository("acme/a", private=True, readers=("alice",))
        fake.add_repository("acme/b", private=True, readers=("bob",))
        fake.add_repository("acme/open", private=False)
        yield fake


@pytest.fixture(scope="module")
def database(postgres_database: str) -> str:
    url = emptied(postgres_database)
    with session_scope(url) as session:
        for name in KNOWN:
            get_or_create_repository(session, f"https://github.com/{name}.git", name)
    return url


@pytest.fixture(scope="module")
def api(database: str, github: FakeGitHub, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``gradci api`` with an operator token, as deployed; its URL."""
    logs = tmp_path_factory.mktemp("api")
    env = service_env(database_url=database, broker_url="memory://", api_token=TOKEN, read_access="public",
                      github_api_url=github.url, workdir=str(logs / "work"))
    with serving_api(env, logs) as served:
        yield served.url


@pytest.fixture
def http(api: str, database: str) -> Iterator[httpx.Client]:
    with session_scope(database) as session:  # every test starts with every option off
        for name in power_repositories(session):
            set_power(session, name, False)
    with httpx.Client(base_url=api, timeout=30) as client:
        yield client


def read_token(database: str, *names: str) -> dict[str, str]:
    with session_scope(database) as session:
        _, token = create_read_token(session, list(names))
    return {"authorization": f"Bearer {token}"}


def powered(database: str) -> frozenset[str]:
    with session_scope(database, readonly=True) as session:
        return power_repositories(session)


def test_a_read_token_of_one_repository_neither_changes_nor_reads_anothers_options(http: httpx.Client,
                                                                                   database: str) -> None:
    token_a = read_token(database, "acme/a")
    for path in ("/api/repos/acme/b/options", "/api/repos/ACME/B/options", "/api/repos/acme/a/options"):
        for method in ("PATCH", "PUT", "POST"):
            answer = http.request(method, path, json={"power": True}, headers=token_a)
            assert answer.status_code in (401, 405), (method, path, answer.status_code, answer.text)
    assert http.get("/api/repos/acme/b/options", headers=token_a).status_code == 404  # as if there were none
    assert http.get("/api/repos/acme/a/options", headers=token_a).json() == {"repository": "acme/a", "power": False}
    assert powered(database) == frozenset()


def test_nobody_without_the_operators_token_changes_options(http: httpx.Client, database: str) -> None:
    change = {"power": True}
    assert http.patch("/api/repos/acme/open/options", json=change).status_code == 401
    assert http.patch("/api/repos/acme/open/options", json=change,
                      headers={"authorization": "Bearer gradci_read_guess"}).status_code == 401
    assert http.patch("/api/repos/acme/open/options", json=change,
                      headers={"authorization": f"Bearer {TOKEN}x"}).status_code == 401
    assert powered(database) == frozenset()


def test_the_operators_token_changes_a_repositorys_options_and_its_readers_see_them(http: httpx.Client,
                                                                                    database: str) -> None:
    on = http.patch("/api/repos/Acme/B/options", json={"power": True}, headers=ADMIN)
    assert on.status_code == 200 and on.json() == {"repository": "acme/b", "power": True}
    assert powered(database) == {"acme/b"}  # what plan_run reads (measures_power), as `gradci repos power on` sets
    assert http.patch("/api/repos/acme/b/options", json={}, headers=ADMIN).json()["power"] is True  # left as it was
    assert http.get("/api/repos/acme/b/options", headers=read_token(database, "acme/b")).json()["power"] is True
    assert http.get("/api/repos/acme/a/options", headers=ADMIN).json()["power"] is False
    for wrong in ({"power": "yes"}, {"power": 1}, {"powr": True}, []):
        assert http.patch("/api/repos/acme/b/options", json=wrong, headers=ADMIN).status_code == 422, wrong
    # A repository gradci has not seen yet may be set up before its first run, as the CLI allows.
    assert http.patch("/api/repos/acme/next/options", json={"power": True}, headers=ADMIN).json()["power"] is True
    off = http.patch("/api/repos/acme/b/options", json={"power": False}, headers=ADMIN)
    assert off.json() == {"repository": "acme/b", "power": False} and powered(database) == {"acme/next"}


def test_anonymous_readers_see_a_public_repositorys_options_and_nothing_of_a_private_one(
        http: httpx.Client, github: FakeGitHub) -> None:
    assert http.get("/api/repos/acme/open/options").json() == {"repository": "acme/open", "power": False}
    assert http.get("/api/repos/acme/b/options").status_code == 404
    assert http.get("/api/repos/acme/b/options", headers={"authorization": "Bearer gradci_read_guess"}).status_code \
        == 401
    asked = len(github.repository_lookups)
    assert http.get("/api/repos/someone/anything/options").status_code == 404
    assert len(github.repository_lookups) == asked  # a name gradci knows nothing of is not looked up on GitHub
    assert http.get("/api/repos/a%2Fb/c/options").status_code in (404, 422)
