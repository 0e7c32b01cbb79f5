"""Detection power as a service option, end to end: ``gradci repos power on`` for a repository, then a
push to its default branch runs on a real worker (PostgreSQL, Redis, the sandboxed runner) with errors
planted in its rules, and stores each cell's power; a pull request's run measures none, and its check
run and comment say which planted perturbation no cell catches, from that default-branch run. The
dashboard shows the smallest δ each cell caught beside its tolerance (real headless Chromium, with
screenshots), and the verdict is the same with power as without."""
from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import select

from gradci._testing.processes import wait_for
from gradci._testing.repos import commit_all, init_repository
from gradci._testing.service import GRADCI, Service
from gradci.services.db.models import CellPower, Result, Run
from gradci.services.db.session import session_scope
from tests.support import webhook_client
from tests.support.app_service import FULL_NAME, INSTALLATION, app_service
from tests.support.browser import browser, script_errors, shoot  # noqa: F401 - browser: a fixture
from tests.support.checkouts import gradci_toml
from tests.support.fake_github import FakeGitHub
from tests.support.payloads import payload, pull_request

pytestmark = pytest.mark.integration

SECRET = webhook_client.SECRET

# Mul's backward returns a gradient for y too, which no scenario differentiates: planted errors in it
# are caught by no cell. Square's backward is compared by its cell.
OPS = '''import torch


class Mul(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, y):
        ctx.save_for_backward(x, y)
        return x * y

    @staticmethod
    def backward(ctx, g):
        x, y = ctx.saved_tensors
        return g * y, g * x


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
SCENARIOS = '''import numpy as np
import torch
from gradci import Scenario
from ops import Mul, Square


def scenarios():
    x = np.array([0.5, 1.0, 2.0])
    y = torch.tensor([1.5, -2.0, 3.0], dtype=torch.float64)
    return [Scenario("mul/gradient", "gradient", {"torch": lambda v: Mul.apply(v, y.to(v.dtype)).sum()}, x),
            Scenario("square/gradient", "gradient", {"torch": lambda v: Square.apply(v).sum()}, x)]
'''
TOML = gradci_toml("grad_scenarios", backends=["torch-rev"], dtypes=["float64"])


@pytest.fixture(scope="module")
def mirror(tmp_path_factory) -> tuple[Path, list[str]]:
    root = tmp_path_factory.mktemp("mirrors")
    repo = init_repository(root / "Codertocat" / "Hello-World.git", "master")
    shas = []
    for message, extra in (("base", ""), ("a pull request", "\n# a comment\n")):
        (repo / "ops.py").write_text(OPS + extra)
        (repo / "grad_scenarios.py").write_text(SCENARIOS)
        (repo / "gradci.toml").write_text(TOML)
        shas.append(commit_all(repo, message))
    return root, shas


@pytest.fixture(scope="module")
def service(postgres_database, redis_database, mirror, github_app, tmp_path_factory) -> Iterator[Service]:
    with app_service(postgres_database, redis_database, mirror[0], *github_app, tmp_path_factory) as running:
        yield running


def deliver(service: Service, event: str, body: dict[str, Any]) -> None:
    body = {**body, "installation": {"id": INSTALLATION}}
    assert webhook_client.deliver_over_http(service.url, event, body, None, SECRET).status_code == 202


def push(sha: str) -> dict[str, Any]:
    body = payload("push")
    body.update(ref="refs/heads/master", after=sha, deleted=False)
    return body


def run_of(service: Service, sha: str) -> int:
    def found() -> int | None:
        with session_scope(service.database_url, readonly=True) as session:
            return session.scalar(select(Run.id).where(Run.head_sha == sha).order_by(Run.id.desc()).limit(1))
    return wait_for(found, f"a run of {sha[:7]}", timeout_s=60)


def powers(service: Service, run_id: int) -> dict[str, dict[str, Any]]:
    with session_scope(service.database_url, readonly=True) as session:
        return {row.scenario: row.record for row in session.scalars(select(CellPower).where(CellPower.run_id == run_id))}


def verdicts(service: Service, run_id: int) -> dict[str, str]:
    with session_scope(service.database_url, readonly=True) as session:
        return {scenario: status for scenario, status in
                session.execute(select(Result.scenario, Result.status).where(Result.run_id == run_id))}


def seconds(service: Service, run_id: int) -> float:
    """The run's wall time, from its first job's start to its end."""
    with session_scope(service.database_url, readonly=True) as session:
        run = session.get(Run, run_id)
        assert run is not None and run.started_at and run.finished_at
        return (run.finished_at - run.started_at).total_seconds()


def completed_check(fake: FakeGitHub, sha: str) -> dict | None:
    return next((run for run in fake.check_runs_for(sha) if run.get("status") == "completed"), None)


@pytest.fixture(scope="module")
def measured(service, mirror) -> dict[str, int]:
    """The power option turned on with the CLI, then a push to master: its run, finished."""
    c0, _ = mirror[1]
    turned = subprocess.run([*GRADCI, "repos", "power", "on", FULL_NAME], env=service.env, capture_output=True,
                            text=True, timeout=120)
    assert turned.returncode == 0 and "detection power on" in turned.stdout, turned.stderr
    listed = subprocess.run([*GRADCI, "repos", "list"], env=service.env, capture_output=True, text=True, timeout=120)
    assert "codertocat/hello-world" in listed.stdout and "on" in listed.stdout, listed.stderr
    deliver(service, "push", push(c0))
    branch = run_of(service, c0)
    service.wait_finished(branch, timeout_s=300)
    return {"branch": branch}


def test_a_default_branch_push_measures_power_and_a_pull_request_reports_what_no_cell_catches(
        service, mirror, github_app, measured):
    fake, _ = github_app
    c0, c1 = mirror[1]
    branch = measured["branch"]
    records = powers(service, branch)
    assert set(records) == {"mul/gradient", "square/gradient"}
    assert records["square/gradient"]["smallest_delta"] is not None  # float64: a small error is caught
    assert records["square/gradient"]["smallest_delta"] <= 1e-3
    assert any("`backward`'s second output" in line for line in records["mul/gradient"]["missed"])
    assert verdicts(service, branch) == {"mul/gradient": "pass", "square/gradient": "pass"}  # plants changed none

    deliver(service, "pull_request", pull_request("opened", c1, c0))
    check = wait_for(lambda: completed_check(fake, c1), "C1's completed check run", timeout_s=240)
    pr = int(check["external_id"])
    assert powers(service, pr) == {}  # a pull request's run never measures power
    assert verdicts(service, pr) == verdicts(service, branch)
    summary = check["output"]["summary"]
    assert check["conclusion"] == "success", summary  # information only: it fails nothing
    assert "### Detection power" in summary and f"#{branch}" in summary
    assert "`Mul` (`ops.py`): `backward`'s second output, scaled by 1.1, a sign flipped, zeroed: caught by no cell" \
        in summary
    (comment,) = wait_for(lambda: fake.comments_on(FULL_NAME, 2), "the pull request's comment", timeout_s=60)
    assert "caught by no cell" in comment["body"]

    print(f"run times: default branch with power {seconds(service, branch):.1f} s, "
          f"pull request without {seconds(service, pr):.1f} s")
    page = httpx.get(f"{service.url}/runs/{pr}/rules")
    assert page.status_code == 200 and f'href="/runs/{branch}/rules#power"' in page.text


def test_the_dashboard_shows_each_cells_smallest_delta_beside_its_tolerance(service, measured, browser):
    branch = measured["branch"]
    browser.get(f"{service.url}/runs/{branch}/rules")
    rules = browser.execute_script(
        "return [...document.querySelectorAll('#power-rules tr')].slice(1).map(r => r.innerText)")
    assert any("Square" in row and "δ = " in row for row in rules), rules
    assert any("Mul" in row and "caught by no cell" in row for row in rules), rules
    cells = browser.execute_script(
        "return [...document.querySelectorAll('#power-cells tr')].slice(1).map(r => r.innerText)")
    square = next(row for row in cells if row.startswith("square/gradient"))
    assert "torch-rev" in square and "float64" in square
    shoot(browser, "power-rules")
    browser.find_element("link text", "square/gradient").click()
    wait_for(lambda: "Detection power" in browser.page_source, "the cell page", timeout_s=30)
    smallest = browser.execute_script("return document.querySelector('#power-summary .smallest-delta').innerText")
    assert float(smallest) <= 1e-3
    outcomes = browser.execute_script(
        "return [...document.querySelectorAll('#power-plants tr')].slice(1).map(r => r.innerText)")
    assert any("caught" in row for row in outcomes), outcomes
    shoot(browser, "power-cell")
    assert script_errors(browser) == []
