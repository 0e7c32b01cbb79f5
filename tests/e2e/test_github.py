"""Pull requests end to end: signed payloads in GitHub's shape over real HTTP → runs on a real worker
(PostgreSQL, Redis) → commit statuses and one comment on a fake GitHub served over loopback."""
from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from gradci._testing.databases import emptied, flushed
from gradci._testing.processes import wait_for
from gradci._testing.repos import commit_all, init_repository
from gradci._testing.service import Service, running_service
from gradci.services.reports.markdown import MARKER
from tests.support import webhook_client
from tests.support.checkouts import gradci_toml
from tests.support.fake_github import FakeGitHub
from tests.support.payloads import pull_request

pytestmark = pytest.mark.integration

SECRET = "e2e-webhook-secret"
FULL_NAME = "Codertocat/Hello-World"
PUBLIC_URL = "http://gradci.example"

TOML = gradci_toml("grad_scenarios", backends=["torch-rev"], dtypes=["float64"]) + "[report.patch]\ntarget = 90\n"

MODULE = '''
import numpy as np
from gradci import Scenario, namespace

def poly(x):
    return namespace(x).sum(x ** 3 - 2 * x)

def trig(x):
    xp = namespace(x)
    return xp.sum(xp.sin(x) * xp.cos(x))

def tanh(x):
    return namespace(x).sum(namespace(x).tanh(x))

def cube(x):
    return x ** 3

def scenarios():
    x = np.array([0.3, -0.2, 0.7])
    made = [
        Scenario("a/poly", "gradient", poly, x{a_reference}),
        Scenario("b/cube", "derivative", cube, 2.0, reference=np.array({b_value})),
        Scenario("c/trig", "gradient", trig, x),
    ]
    return made + ({extra})
'''


def commit(repo: Path, message: str, a_reference: str = "", b_value: float = 13.0, extra: str = "[]") -> str:
    (repo / "grad_scenarios.py").write_text(MODULE.format(a_reference=a_reference, b_value=b_value, extra=extra))
    (repo / "NOTES").write_text(message)
    return commit_all(repo, message)


@pytest.fixture(scope="module")
def mirror(tmp_path_factory) -> tuple[Path, list[str]]:
    """file:// mirror of Codertocat/Hello-World: C0 (base) and the pull request's pushes C1, C2, C3."""
    root = tmp_path_factory.mktemp("mirrors")
    repo = init_repository(root / "Codertocat" / "Hello-World.git", "master")
    (repo / "gradci.toml").write_text(TOML)
    shas = [commit(repo, "base: b has a wrong reference")]
    new_scenario = '[Scenario("d/tanh", "gradient", tanh, x)]'
    shas.append(commit(repo, "fix b, add d", b_value=12.0, extra=new_scenario))
    broken_a = ", reference=np.array([0.0, 0.0, 0.0])"
    shas.append(commit(repo, "break a", a_reference=broken_a, b_value=12.0, extra=new_scenario))
    shas.append(commit(repo, "touch notes", a_reference=broken_a, b_value=12.0, extra=new_scenario))
    return root, shas


@pytest.fixture(scope="module")
def github_service(postgres_database, redis_database, mirror, github, tmp_path_factory) -> Iterator[Service]:
    """``gradci api`` and a cpu worker on PostgreSQL (emptied: this flow counts runs from none) and Redis,
    cloning from ``mirror`` and reporting to the fake ``github``, webhooks signed with ``SECRET``."""
    logs = tmp_path_factory.mktemp("logs")
    with running_service(emptied(postgres_database), flushed(redis_database), tmp_path_factory.mktemp("work"), logs,
                         concurrency=1, github_webhook_secret=SECRET, github_token="gh-token",
                         github_api_url=github.url, public_url=PUBLIC_URL,
                         clone_url_template=f"file://{mirror[0]}/{{full_name}}.git", worker_heartbeat_s="1") as service:
        try:
            yield service
        finally:
            print(service.log("gradci.worker.log")[-4000:])


def deliver(url: str, event: str, body: dict, delivery: str | None = None, secret: str = SECRET) -> httpx.Response:
    return webhook_client.deliver_over_http(url, event, body, delivery, secret)


def final_status(github: FakeGitHub, sha: str, context: str) -> dict | None:
    done = [s for s in github.statuses_for(sha, context) if s["state"] != "pending"]
    return done[-1] if done else None


def test_pull_request_flow(github_service, mirror, github):
    server = github_service.url
    c0, c1, c2, c3 = mirror[1]

    # Refused or ignored deliveries start nothing.
    assert deliver(server, "pull_request", pull_request("opened", c1, c0), secret="wrong").status_code == 401
    fork = pull_request("opened", c1, c0)
    fork["pull_request"]["head"]["repo"]["full_name"] = "mallory/Hello-World"
    assert deliver(server, "pull_request", fork).status_code == 202
    fork["pull_request"]["head"]["repo"] = None
    assert deliver(server, "pull_request", fork).status_code == 202
    assert deliver(server, "deployment", {"action": "created"}).status_code == 202
    assert httpx.get(f"{server}/api/runs").json()["items"] == []

    # Opened: a run of C1 and a baseline run of C0; pending first, the report once both finished.
    answer = deliver(server, "pull_request", pull_request("opened", c1, c0), delivery="opened-1")
    assert answer.status_code == 202
    assert deliver(server, "pull_request", pull_request("opened", c1, c0), delivery="opened-1").json()["duplicate"]
    wait_for(lambda: final_status(github, c1, "gradci/patch"), "C1's final statuses", timeout_s=180)
    assert github.statuses_for(c1, "gradci/project")[0]["state"] == "pending"
    project, patch = final_status(github, c1, "gradci/project"), final_status(github, c1, "gradci/patch")
    assert project["state"] == "success" and "100.00% (+33.33%) compared to " + c0[:7] in project["description"]
    assert patch["state"] == "success" and patch["description"].startswith("100.00% of 2 changed cells pass")
    assert project["target_url"].startswith(f"{PUBLIC_URL}/runs/")
    # The comment goes out after the statuses, in the same publication: wait for it as well.
    (comment,) = wait_for(lambda: github.comments_on(FULL_NAME, 2), "the pull request's comment", timeout_s=60)
    assert comment["body"].startswith(MARKER)
    assert f"Patch coverage is **100.00%** and project coverage is **100.00%** (head `{c1[:7]}`" in comment["body"]
    assert "**Fixes** (1)" in comment["body"] and "fail → pass" in comment["body"]

    # Two quick pushes: C2's run is superseded by C3's; GitHub answers 502 twice on the way.
    github.fail_next = [502, 502]
    assert deliver(server, "pull_request", pull_request("synchronize", c2, c0)).status_code == 202
    assert deliver(server, "pull_request", pull_request("synchronize", c3, c0)).status_code == 202
    wait_for(lambda: final_status(github, c3, "gradci/patch"), "C3's final statuses", timeout_s=180)
    runs = {r["head_sha"]: r for r in httpx.get(f"{server}/api/runs").json()["items"]}
    assert runs[c2]["status"] == "cancelled"
    wait_for(lambda: final_status(github, c2, "gradci/project"), "C2's cancelled status", timeout_s=60)
    assert final_status(github, c2, "gradci/project")["state"] == "error"
    assert [c["answered"] for c in github.calls].count(502) == 2
    project, patch = final_status(github, c3, "gradci/project"), final_status(github, c3, "gradci/patch")
    assert project["state"] == "success"            # 75% against the base's 66.67%: "auto" is met
    assert patch["state"] == "failure"              # 2 of 3 changed cells pass, target 90%
    assert all(len(s["description"]) <= 140 for s in github.statuses)
    (comment_after,) = wait_for(lambda: [c for c in github.comments_on(FULL_NAME, 2) if f"`{c3[:7]}`" in c["body"]],
                                "the comment edited for C3", timeout_s=60)  # the same comment, edited in place
    assert comment_after["id"] == comment["id"]
    body = comment_after["body"]
    assert f"`{c3[:7]}`" in body and "**Regressions** (1)" in body and "pass → fail" in body
    assert "@@           Gradient Coverage Diff           @@" in body and "#2" in body
    diff = body.split("```diff\n")[1].split("```")[0]
    assert "+ Coverage" in diff and "- Failed" not in diff

    # The report is served too, as JSON and as the comment's markdown.
    report = httpx.get(f"{server}/api/runs/{runs[c3]['id']}/report").json()
    assert [c["scenario"] for c in report["regressions"]] == ["a/poly"]
    markdown = httpx.get(f"{server}/api/runs/{runs[c3]['id']}/report", params={"format": "markdown"}).text
    assert markdown.startswith(MARKER)

    # Closing the pull request starts nothing new.
    count = len(httpx.get(f"{server}/api/runs").json()["items"])
    assert deliver(server, "pull_request", pull_request("closed", c3, c0)).status_code == 202
    assert len(httpx.get(f"{server}/api/runs").json()["items"]) == count


def test_a_forks_label_approves_only_the_commit_it_was_added_on(github_service, mirror):
    """GitHub keeps a label across pushes: left on a fork's pull request, it must not run what the
    fork pushes after the maintainer read it (as GitHub's "approve and run" is asked again per push)."""
    server = github_service.url
    c0, _, c2, c3 = mirror[1]
    labeled = pull_request("labeled", c2, c0)
    labeled["number"] = labeled["pull_request"]["number"] = 31
    labeled["pull_request"]["head"]["repo"]["full_name"] = "mallory/Hello-World"
    labeled["label"], labeled["pull_request"]["labels"] = {"name": "gradci:run"}, [{"name": "gradci:run"}]
    approved = deliver(server, "pull_request", labeled)
    assert approved.status_code == 202 and approved.json()["accepted"] == "run_pr", approved.text

    def runs_of_31(sha: str) -> list[dict]:
        runs = httpx.get(f"{server}/api/runs", params={"sha": sha}).json()["items"]
        return [run for run in runs if run["pr_number"] == 31]

    wait_for(lambda: runs_of_31(c2), "the approved commit's run", timeout_s=60)
    pushed = copy.deepcopy(labeled)
    pushed["action"] = "synchronize"
    pushed["pull_request"]["head"]["sha"] = c3
    del pushed["label"]
    answer = deliver(server, "pull_request", pushed)
    assert answer.status_code == 202 and "approved an earlier commit" in answer.json()["ignored"], answer.text
    assert runs_of_31(c3) == []
