"""gradci as a GitHub App against the fake GitHub, which checks credentials as GitHub does: the App's
JWT (RS256, verified with the App's public key) for an installation token, the token for every
repository call; check runs completed with annotations in batches of 50."""
from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from gradci.services.github import check_runs
from gradci.services.github.app_auth import InstallationTokens, app_jwt, client_for
from gradci.services.github.client import GitHubError
from gradci.services.github.events import DecisionKind, decide
from gradci.services.reports.annotations import Annotation
from gradci.services.settings import Settings
from tests.support.fake_github import FakeGitHub
from tests.support.payloads import pull_request

APP_ID, INSTALLATION = 4242, 77
REPO = "octo/kernels"


@pytest.fixture
def github() -> Iterator[tuple[FakeGitHub, Settings]]:
    with FakeGitHub() as fake:
        key = fake.as_app(APP_ID, {INSTALLATION: {REPO}})
        yield fake, Settings(github_api_url=fake.url, github_app_id=APP_ID, github_app_private_key=key)


def test_an_installation_token_is_asked_for_with_the_apps_jwt_and_kept(github) -> None:
    fake, settings = github
    tokens = InstallationTokens()
    first = tokens.token(settings, INSTALLATION)
    assert tokens.token(settings, INSTALLATION) == first  # kept until shortly before it expires
    exchanges = [c for c in fake.calls if c["path"].endswith("/access_tokens")]
    assert len(exchanges) == 1 and exchanges[0]["answered"] == "ok"
    tokens.forget(settings, INSTALLATION)
    assert tokens.token(settings, INSTALLATION) != first


def test_an_expiring_token_is_renewed(github) -> None:
    fake, settings = github
    offset = [0.0]
    tokens = InstallationTokens(clock=lambda: time.time() + offset[0])
    first = tokens.token(settings, INSTALLATION)
    offset[0] = 3600 - 240  # within the renewal margin of the hour GitHub gave it
    renewed = tokens.token(settings, INSTALLATION)
    assert renewed != first and fake.tokens[renewed][0] == INSTALLATION


def test_a_jwt_signed_by_another_key_is_refused(github) -> None:
    fake, settings = github
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL, serialization.NoEncryption())
    forged = Settings(github_api_url=fake.url, github_app_id=APP_ID, github_app_private_key=other.decode())
    with pytest.raises(GitHubError, match="401"):
        InstallationTokens().token(forged, INSTALLATION)
    assert app_jwt(APP_ID, settings.github_app_key()).count(".") == 2


def test_repository_calls_need_the_installations_token(github) -> None:
    fake, settings = github
    with client_for(settings, INSTALLATION, REPO) as client:
        run_id = check_runs.start(client, REPO, "a" * 40, 5, "http://gradci/runs/5", "Checking derivatives…")
    assert fake.check_runs[run_id]["status"] == "in_progress" and fake.check_runs[run_id]["external_id"] == "5"
    fake.installations[INSTALLATION + 1] = {"someone/else"}
    with client_for(settings, INSTALLATION + 1, REPO) as other, pytest.raises(GitHubError, match="403"):
        check_runs.start(other, REPO, "a" * 40, 5, None, "x")  # a token of an installation without the repo
    stolen = Settings(github_api_url=fake.url, github_token="ghs_not-issued-by-github")
    with client_for(stolen, None, REPO) as client, pytest.raises(GitHubError, match="401"):
        check_runs.start(client, REPO, "a" * 40, 5, None, "x")
    with client_for(settings, None, REPO) as found:  # no webhook named it: asked of GitHub with the JWT
        check_runs.start(found, REPO, "a" * 40, 5, None, "x")
    with pytest.raises(GitHubError, match="not installed on someone/else-entirely"):
        client_for(settings, None, "someone/else-entirely")


def test_a_check_run_completes_with_every_annotation_fifty_at_a_time(github) -> None:
    fake, settings = github
    annotations = [Annotation(path="grads/scenarios.py", start_line=i + 1, title=f"s{i}: 1 failing cell",
                              message="torch-rev · cpu · float64: fail: off by 1.5x") for i in range(120)]
    with client_for(settings, INSTALLATION, REPO) as client:
        run_id = check_runs.start(client, REPO, "b" * 40, 6, None, "Checking derivatives…")
        check_runs.complete(client, REPO, run_id, "failure", "coverage 40%", "the report", annotations)
    run = fake.check_runs[run_id]
    assert run["status"] == "completed" and run["conclusion"] == "failure"
    assert [a["start_line"] for a in run["annotations"]] == list(range(1, 121))
    patches = [c for c in fake.calls if c["method"] == "PATCH"]
    assert [len(c["body"]["output"]["annotations"]) for c in patches] == [50, 50, 20]
    assert all(c["body"]["output"]["summary"] == "the report" for c in patches)


# --- deciding App events from the payload alone -------------------------------------------------------


REPOSITORY = {"full_name": REPO, "clone_url": f"https://github.com/{REPO}.git"}


def test_app_mode_refuses_a_repositorys_webhook_that_names_no_installation() -> None:
    body = pull_request("opened", "a" * 40, "b" * 40)
    assert decide("pull_request", body, [], app_mode=True).installation_id == 1  # GitHub's example names one
    del body["installation"]
    refused = decide("pull_request", body, ["*"], app_mode=True)  # registered: open on purpose
    assert refused.kind == DecisionKind.refuse and "names no installation of gradci's GitHub App" in refused.reason
    assert decide("pull_request", body, []).kind == DecisionKind.run_pr  # token mode: no installation needed


def test_installations_add_and_remove_repositories_the_allowed_ones_only() -> None:
    created = {"action": "created", "installation": {"id": 9},
               "repositories": [{"full_name": REPO}, {"full_name": "elsewhere/x"}]}
    decision = decide("installation", created, ["octo/*"], app_mode=True)
    assert (decision.kind, decision.installation_id, decision.added, decision.removed) == \
        (DecisionKind.installation, 9, (REPO,), ())
    deleted = decide("installation", {**created, "action": "deleted"}, [], app_mode=True)
    assert deleted.removed == (REPO, "elsewhere/x") and deleted.added == ()
    changed = decide("installation_repositories", {"action": "removed", "installation": {"id": 9},
                                                   "repositories_added": [], "repositories_removed": [{"full_name": REPO}]},
                     [], app_mode=True)
    assert changed.removed == (REPO,)
    assert decide("installation", created, []).kind == DecisionKind.ignore  # token mode


def test_rerun_requests_name_the_run_or_the_commit() -> None:
    run = decide("check_run", {"action": "rerequested", "installation": {"id": 9}, "repository": REPOSITORY,
                               "check_run": {"external_id": "17", "head_sha": "c" * 40}}, [REPO], app_mode=True)
    assert (run.kind, run.run_id, run.head_sha, run.full_name) == (DecisionKind.rerun, 17, "c" * 40, REPO)
    suite = decide("check_suite", {"action": "rerequested", "installation": {"id": 9}, "repository": REPOSITORY,
                                   "check_suite": {"head_sha": "d" * 40}}, [REPO], app_mode=True)
    assert (suite.kind, suite.run_id, suite.head_sha) == (DecisionKind.rerun, None, "d" * 40)
    foreign = decide("check_run", {"action": "rerequested", "installation": {"id": 9}, "repository": REPOSITORY,
                                   "check_run": {"external_id": "", "head_sha": "c" * 40}}, [REPO], app_mode=True)
    assert foreign.kind == DecisionKind.ignore  # a check run of another App
    assert decide("check_run", {"action": "rerequested", "repository": REPOSITORY}, ["other/*"],
                  app_mode=True).kind == DecisionKind.refuse
