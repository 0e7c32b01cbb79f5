"""Rule coverage and detection power uploaded from a project's own CI, end to end: ``gradci check
--power --upload`` on a push to main (an upload token) → ``gradci api`` on PostgreSQL stores the
cells' rule-coverage and power records and the checkout's rules → the uploaded run's report and
dashboard show its rules and power as a worker's run does; the method sources come from the checkout."""
from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy import select

from gradci._testing.repos import commit_all, init_repository
from gradci._testing.service import Service
from gradci.services.db.models import CellPower, RuleCatalogEntry, RuleReach
from gradci.services.db.session import session_scope
from tests.support.checkouts import gradci_toml
from tests.support.fake_github import FakeGitHub
from tests.support.fake_oidc import FakeOidcIssuer
from tests.support.uploads import REPO, gradci, new_token, upload_service

pytestmark = pytest.mark.integration

SHA = "4" * 40
CHECK = ["--backends", "torch-rev", "--dtypes", "float64", "--devices", "cpu", "-j", "1"]
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
'''
SCENARIOS = '''import numpy as np
import torch
from gradci import Scenario
from ops import Mul


def scenarios():
    y = torch.tensor([1.5, -2.0, 3.0], dtype=torch.float64)
    return [Scenario("mul/gradient", "gradient", {"torch": lambda v: Mul.apply(v, y.to(v.dtype)).sum()},
                     np.array([0.5, 1.0, 2.0]))]
'''


@pytest.fixture(scope="module", name="upload_service")
def upload_service_fixture(postgres_database: str, redis_database: str, github: FakeGitHub, issuer: FakeOidcIssuer,
                           tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    with upload_service(postgres_database, redis_database, github, issuer, tmp_path_factory) as service:
        yield service


def test_an_uploaded_check_with_power_shows_its_rules_and_power(upload_service: Service, tmp_path: Path) -> None:
    project = init_repository(tmp_path / "project", "main")
    (project / "ops.py").write_text(OPS)
    (project / "grad_scenarios.py").write_text(SCENARIOS)
    (project / "gradci.toml").write_text(gradci_toml("grad_scenarios", backends=["torch-rev"], dtypes=["float64"]))
    commit_all(project, "a rule")
    env = {key: value for key, value in os.environ.items() if not key.startswith(("GRADCI_", "GITHUB_", "ACTIONS_"))}
    env.update(GITHUB_ACTIONS="true", GITHUB_REPOSITORY=REPO, GITHUB_SHA=SHA, GITHUB_REF="refs/heads/main",
               GRADCI_UPLOAD_TOKEN=new_token(upload_service))
    done = gradci(upload_service, "check", "--repo", str(project), *CHECK, "--power", "--upload", upload_service.url,
                  env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    run_id = int(done.stderr.split(" to run ")[1].split(":")[0])
    run = upload_service.wait_finished(run_id)
    assert (run["trigger"], run["status"]) == ("upload", "passed")  # the verdict, as without power

    with session_scope(upload_service.database_url, readonly=True) as session:
        (entry,) = session.scalars(select(RuleCatalogEntry).where(RuleCatalogEntry.run_id == run_id))
        reached = sorted(session.scalars(select(RuleReach.method).where(RuleReach.run_id == run_id)))
        (power,) = session.scalars(select(CellPower).where(CellPower.run_id == run_id))
    assert (entry.rule_id, entry.kind) == ("ops.py::Mul", "torch.autograd.Function")
    backward = next(m for m in entry.methods if m["name"] == "backward")
    assert "return g * y, g * x" in backward["source"]  # read from the checkout by the CLI
    assert reached == ["backward", "forward"]
    assert power.smallest_delta is not None and power.smallest_delta <= 1e-3
    assert any("second output" in line for line in power.record["missed"])

    report = httpx.get(f"{upload_service.url}/api/runs/{run_id}/report", timeout=10).json()
    assert report["rules"]["rule_count"] == 1
    assert report["power"]["own"] and report["power"]["finding_count"] == 1
    page = httpx.get(f"{upload_service.url}/runs/{run_id}/rules", timeout=10)
    assert page.status_code == 200 and 'id="power-cells"' in page.text and "<code>Mul</code>" in page.text
    file_page = httpx.get(f"{upload_service.url}/runs/{run_id}/rules/file", params={"path": "ops.py"}, timeout=10)
    assert "return g * y, g * x" in file_page.text
