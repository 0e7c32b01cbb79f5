"""Rule coverage where the user looks, end to end: a pull request that changes one derivative rule and
adds two — one no scenario reaches, one whose jvp only reverse cells reach — runs on a real worker
(PostgreSQL, Redis, the sandboxed runner) in App mode. Its check run fails with the rules section
in its summary and annotations on the rules' own lines, its PR comment says the same, and the
dashboard's rules pages show the matrix and the file's reached lines; with gradci.toml's
``[rules] unexercised = "warning"`` the same findings are warnings and the check passes."""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from gradci._testing.processes import wait_for
from gradci._testing.repos import commit_all, init_repository
from gradci._testing.service import Service
from tests.support import webhook_client
from tests.support.app_service import FULL_NAME, INSTALLATION, app_service
from tests.support.checkouts import gradci_toml
from tests.support.fake_github import FakeGitHub
from tests.support.payloads import pull_request

pytestmark = pytest.mark.integration

SECRET = webhook_client.SECRET

BASE_OPS = '''import torch


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
# Square's backward changed (same result), and two rules added.
PR_OPS = BASE_OPS.replace("return 2 * x * g", "two = 2\n        return two * x * g") + '''

class Unused(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.sin()

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return x.cos() * g


class Cube(torch.autograd.Function):
    generate_vmap_rule = True

    @staticmethod
    def forward(x):
        return x ** 3

    @staticmethod
    def setup_context(ctx, inputs, output):
        (x,) = inputs
        ctx.save_for_backward(x)
        ctx.save_for_forward(x)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return 3 * x ** 2 * g

    @staticmethod
    def jvp(ctx, t):
        (x,) = ctx.saved_tensors
        return 3 * x ** 2 * t
'''
BASE_SCENARIOS = '''import numpy as np
from gradci import Scenario
from ops import Square


def scenarios():
    x = np.array([0.5, 1.0, 2.0])
    return [Scenario("square/gradient", "gradient", {"torch": lambda v: Square.apply(v).sum()}, x)]
'''
PR_SCENARIOS = BASE_SCENARIOS.replace("from ops import Square", "from ops import Cube, Square").replace(
    "x)]", 'x),\n            Scenario("cube/gradient", "gradient", {"torch": lambda v: Cube.apply(v).sum()}, x)]')
TOML = gradci_toml("grad_scenarios", backends=["torch-rev"], dtypes=["float64"])


def commit(repo: Path, ops: str, scenarios: str, toml: str, message: str) -> str:
    (repo / "ops.py").write_text(ops)
    (repo / "grad_scenarios.py").write_text(scenarios)
    (repo / "gradci.toml").write_text(toml)
    return commit_all(repo, message)


def line_of(text: str, needle: str, after: str = "") -> int:
    start = text.index(after) if after else 0
    return text.count("\n", 0, text.index(needle, start)) + 1


@pytest.fixture(scope="module")
def mirror(tmp_path_factory) -> tuple[Path, list[str]]:
    root = tmp_path_factory.mktemp("mirrors")
    repo = init_repository(root / "Codertocat" / "Hello-World.git", "master")
    return root, [commit(repo, BASE_OPS, BASE_SCENARIOS, TOML, "base: one rule, reached"),
                  commit(repo, PR_OPS, PR_SCENARIOS, TOML, "change Square, add Unused and Cube"),
                  commit(repo, PR_OPS, PR_SCENARIOS, TOML + '[rules]\nunexercised = "warning"\n', "rules: warnings")]


@pytest.fixture(scope="module")
def service(postgres_database, redis_database, mirror, github_app, tmp_path_factory) -> Iterator[Service]:
    with app_service(postgres_database, redis_database, mirror[0], *github_app, tmp_path_factory) as running:
        yield running


def completed_check(fake: FakeGitHub, sha: str) -> dict | None:
    return next((run for run in fake.check_runs_for(sha) if run.get("status") == "completed"), None)


def deliver(service: Service, action: str, head: str, base: str) -> None:
    body = {**pull_request(action, head, base), "installation": {"id": INSTALLATION}}
    assert webhook_client.deliver_over_http(service.url, "pull_request", body, None, SECRET).status_code == 202


def test_unexercised_rules_fail_the_check_run_on_their_lines_and_show_on_the_dashboard(service, mirror, github_app):
    fake, _ = github_app
    c0, c1, c2 = mirror[1]
    deliver(service, "opened", c1, c0)
    check = wait_for(lambda: completed_check(fake, c1), "C1's completed check run", timeout_s=240)
    summary = check["output"]["summary"]
    assert check["conclusion"] == "failure", summary
    assert "### Rules" in summary and "adds or changes **3** of the checkout's 3 derivative rules" in summary
    assert "| `Square` `ops.py:" in summary and "| changed |" in summary
    assert "not exercised by any scenario" in summary
    assert "**backward exercised, jvp never**" in summary  # Cube: torch-rev ran its backward, no cell its jvp
    annotations = {(a["path"], a["start_line"], a["end_line"]): a for a in check["annotations"]}
    # From the method's decorator (its first line) to its last.
    unused = ("ops.py", line_of(PR_OPS, "def backward", "class Unused") - 1, line_of(PR_OPS, "return x.cos() * g"))
    jvp = ("ops.py", line_of(PR_OPS, "def jvp") - 1, line_of(PR_OPS, "return 3 * x ** 2 * t"))
    assert annotations[unused]["annotation_level"] == "failure"
    assert annotations[unused]["title"] == "Unused: not exercised by any scenario"
    assert annotations[jvp]["title"] == "Cube: backward exercised, jvp never"
    # the comment is published after the check run: wait for it too
    (comment,) = wait_for(lambda: fake.comments_on(FULL_NAME, 2), "the pull request's comment", timeout_s=60)
    assert "not exercised by any scenario" in comment["body"] and "❌" in comment["body"]

    # The dashboard: the matrix (rule method × backend · operator) and the file's reached lines.
    run_id = int(check["external_id"])
    page = httpx.get(f"{service.url}/runs/{run_id}/rules")
    assert page.status_code == 200 and 'id="rule-matrix"' in page.text
    assert "<code>Unused</code>" in page.text and "not exercised by any scenario" in page.text
    file_page = httpx.get(f"{service.url}/runs/{run_id}/rules/file", params={"path": "ops.py"})
    assert file_page.status_code == 200
    reached = line_of(PR_OPS, "return two * x * g")
    assert f'<span class="reached" data-line="{reached}">' in file_page.text
    assert f'<span class="missed" data-line="{unused[1] + 2}">' in file_page.text  # Unused's backward body

    # The same rules with [rules] unexercised = "warning": reported, the check passes.
    deliver(service, "synchronize", c2, c0)
    check = wait_for(lambda: completed_check(fake, c2), "C2's completed check run", timeout_s=240)
    assert check["conclusion"] == "success", check["output"]["summary"]
    assert "not exercised by any scenario" in check["output"]["summary"] and "⚠️" in check["output"]["summary"]
    levels = {a["title"]: a["annotation_level"] for a in check["annotations"]}
    assert levels["Unused: not exercised by any scenario"] == "warning"
