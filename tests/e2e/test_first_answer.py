"""A pull request's first answer, end to end (App mode, PostgreSQL, Redis, one real worker, the fake
GitHub): its check run exists before its run is planned; the job of the scenario that reached the
rule it changed is sent first, then that of the scenario that failed on the base; and the check run
names the first failure while a slow job still runs, before the run is completed."""
from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import select

from gradci._testing.processes import wait_for
from gradci._testing.repos import commit_all, init_repository
from gradci._testing.service import Service, jobs_of
from gradci.services.db.models import Job, Run
from gradci.services.db.session import session_scope
from tests.support import webhook_client
from tests.support.app_service import INSTALLATION
from tests.support.checkouts import gradci_toml
from tests.support.fake_github import FakeGitHub
from tests.support.payloads import payload, pull_request

pytestmark = pytest.mark.integration

SECRET = webhook_client.SECRET

OPS = '''import torch


class Square(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return 2 * x * g
'''
CHANGED_OPS = OPS.replace("return 2 * x * g", "two = 2\n        return two * x * g")  # same derivative
SCENARIOS = '''import time

import numpy as np
from gradci import Scenario, namespace
from ops import Square


def poly(x):
    return namespace(x).sum(x ** 3 - 2 * x)


def slow(x):
    time.sleep(2)  # each call: its job is still running well after the others
    return namespace(x).sum(x ** 2)


def scenarios():
    x = np.array([0.3, -0.2, 0.7])
    return [
        Scenario("a/ok", "gradient", poly, x),
        Scenario("b/slow", "gradient", slow, x, reference=2 * x),
        Scenario("c/square", "gradient", {"torch": lambda v: Square.apply(v).sum()}, x),
        Scenario("d/fails", "gradient", poly, x, reference=np.zeros(3)),
    ]
'''


@pytest.fixture(scope="module")
def mirror(tmp_path_factory) -> tuple[Path, list[str]]:
    root = tmp_path_factory.mktemp("mirrors")
    repo = init_repository(root / "Codertocat" / "Hello-World.git", "master")
    (repo / "gradci.toml").write_text(gradci_toml("grad_scenarios", backends=["torch-rev"], dtypes=["float64"]))
    (repo / "grad_scenarios.py").write_text(SCENARIOS)
    shas = []
    for message, ops in (("base: d fails", OPS), ("change Square's backward", CHANGED_OPS)):
        (repo / "ops.py").write_text(ops)
        shas.append(commit_all(repo, message))
    return root, shas


@pytest.fixture(scope="module")
def service(one_process_service: Service) -> Service:
    return one_process_service


def deliver(service: Service, event: str, body: dict) -> None:
    body = {**body, "installation": {"id": INSTALLATION}}
    answer = webhook_client.deliver_over_http(service.url, event, body, None, SECRET)
    assert answer.status_code == 202, answer.text


def completed(fake: FakeGitHub, sha: str) -> dict | None:
    return next((run for run in fake.check_runs_for(sha) if run.get("status") == "completed"), None)


def test_the_first_answer_comes_first_and_the_first_failure_before_the_end(service, mirror, github_app):
    fake, _ = github_app
    c0, c1 = mirror[1]

    def observe(call: dict) -> None:
        """What the run of a check-run call was doing when the call arrived: its jobs and status."""
        if "/check-runs" not in call["path"] or call["method"] not in ("POST", "PATCH"):
            return
        parts = call["path"].rstrip("/").split("/")
        external = (call["body"] or {}).get("external_id") if call["method"] == "POST" else \
            fake.check_runs.get(int(parts[-1]), {}).get("external_id")
        if external is None:
            return
        with session_scope(service.database_url, readonly=True) as session:
            call["then"] = {"run": session.get(Run, int(external)).status,
                            "jobs": list(session.scalars(select(Job.status).where(Job.run_id == int(external))))}

    fake.observers.append(observe)
    base_push = payload("push")
    base_push.update(ref="refs/heads/master", after=c0, deleted=False)
    deliver(service, "push", base_push)
    base = wait_for(lambda: completed(fake, c0), "the base run's completed check run", timeout_s=240)
    assert service.run(int(base["external_id"]))["status"] == "failed"  # d/fails
    base_jobs = jobs_of(service.database_url, int(base["external_id"]))
    assert [job.scenarios for job in base_jobs][0] == ["a/ok"]  # nothing earlier: the listed order

    deliver(service, "pull_request", pull_request("opened", c1, c0))
    check = wait_for(lambda: completed(fake, c1), "C1's completed check run", timeout_s=240)
    run_id = int(check["external_id"])
    calls = [c for c in fake.calls if c.get("then") is not None and
             (c["method"] == "POST" and c["body"]["head_sha"] == c1 or c["path"].endswith(f"/{check['id']}"))]
    # 1. The check run was created in progress before planning stored a single job.
    created = calls[0]
    assert created["method"] == "POST" and created["body"]["status"] == "in_progress"
    assert created["then"]["jobs"] == [], created["then"]
    # 2. Sent first: the job of the scenario that reached the changed rule, then the base's failure.
    jobs = jobs_of(service.database_url, run_id)
    assert [job.scenarios[0] for job in jobs][:2] == ["c/square", "d/fails"]
    by_start = sorted(jobs, key=lambda job: job.started_at)
    assert [job.scenarios[0] for job in by_start][:2] == ["c/square", "d/fails"]
    # 3. While the run still ran (its slow job unfinished), an update named the failure.
    progress = [c for c in calls if c["method"] == "PATCH" and "status" not in c["body"]
                and "d/fails" in c["body"]["output"]["summary"]]
    assert progress, [c["body"] for c in calls]
    first = progress[0]
    assert first["then"]["run"] == "running" and {"queued", "running"} & set(first["then"]["jobs"]), first["then"]
    assert "1 failing cell so far, first: d/fails" in first["body"]["output"]["title"]
    completing = next(i for i, c in enumerate(calls) if c["body"].get("status") == "completed")
    assert calls.index(first) < completing
    assert service.run(run_id)["status"] == "failed" and "d/fails" in check["output"]["summary"]
    assert not [c for c in fake.calls if c["answered"] in (401, 403)]
