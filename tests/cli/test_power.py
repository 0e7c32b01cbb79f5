"""`gradci check --power` as a user runs it: the sandboxed runner, the tables, the JSON records."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.projects import gradci_check, project_copy

pytestmark = pytest.mark.slow  # gradci check subprocesses: seconds apiece


@pytest.fixture
def project(tmp_path) -> Path:
    return project_copy("power", tmp_path / "project")


def test_power_prints_what_no_cell_catches_and_leaves_verdicts_and_exit_code_alone(project):
    plain = gradci_check(project, "-k", "mul/*,wrong", "--format", "json")
    powered = gradci_check(project, "-k", "mul/*,wrong", "--format", "json", "--power")
    assert plain.returncode == powered.returncode == 1, powered.stderr  # WrongMul fails either way
    cells, with_power = json.loads(plain.stdout), json.loads(powered.stdout)
    verdict = ("scenario", "backend", "device", "dtype", "status", "max_abs_err", "message")
    assert [[c[k] for k in verdict] for c in cells] == [[c[k] for k in verdict] for c in with_power]
    power = {(c["scenario"], c["backend"], c["dtype"]): c.get("power") for c in with_power}
    assert power[("mul/gradient", "torch-rev", "float64")]["smallest_delta"] <= 1e-3
    assert any("second output" in line for line in power[("mul/gradient", "jax-rev-jit", "float64")]["missed"])
    assert "fail without a plant" in power[("wrong/gradient", "torch-rev", "float64")]["not_measured"]
    text = " ".join(powered.stderr.split())  # with --format json the rules' tables go to stderr
    assert "power: Mul (powerops/ops.py): `backward`'s second output" in text and "caught by no cell" in text
    assert "Mul: weakest perturbation caught: δ = 1e-05 in `backward`'s first output" in text


def test_power_needs_a_repository_and_rule_coverage(project):
    out = subprocess.run([sys.executable, "-m", "gradci", "check", "--family", "elementary", "--power"], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 2 and "--power plants errors in a repository's own derivative rules" in out.stderr
    out = gradci_check(project, "--power", "--no-rules")
    assert out.returncode == 2 and "drop --no-rules" in out.stderr


HANGING_RULE = '''
import time

import numpy as np
import torch

from gradci import Scenario


class Square(torch.autograd.Function):
    """x², its backward right: what power plants errors in (a sign flip reaches Guard and Raising)."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return 2 * x * g


class Guard(torch.autograd.Function):
    """Passes the gradient through, but waits on a "solver" that never converges for a negative gradient."""

    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, g):
        while (g < 0).any():
            time.sleep(0.2)
        return g


class Raising(torch.autograd.Function):
    """Passes the gradient through, and raises on a negative one (an assertion of the user's)."""

    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, g):
        if (g < 0).any():
            raise SystemExit("negative gradient")
        return g


def scenarios():
    x = np.array([0.5, 1.0])
    return [Scenario("hangs", "gradient", {"torch": lambda v: Square.apply(Guard.apply(v)).sum()}, x),
            Scenario("raises", "gradient", {"torch": lambda v: Square.apply(Raising.apply(v)).sum()}, x)]
'''


def test_a_plant_that_hangs_or_raises_in_a_rule_leaves_the_verdicts_alone(tmp_path):
    root = tmp_path / "hang"
    (root / "hang").mkdir(parents=True)
    (root / "hang" / "__init__.py").write_text("")
    (root / "hang" / "scenarios.py").write_text(HANGING_RULE)
    (root / "gradci.toml").write_text('[scenarios]\nmodules = ["hang.scenarios"]\n\n'
                                      '[matrix]\nbackends = ["torch-rev"]\ndtypes = ["float64"]\n')
    powered = gradci_check(root, "--format", "json", "--power", "--cell-timeout", "8")
    assert powered.returncode == 0, powered.stderr  # a sign flip planted in each backward makes it hang or raise
    cells = {c["scenario"]: c for c in json.loads(powered.stdout)}
    assert {name: c["status"] for name, c in cells.items()} == {"hangs": "pass", "raises": "pass"}
    assert "re-runs with planted errors failed" in cells["hangs"]["power"]["not_measured"]
    assert "timeout" in cells["hangs"]["power"]["not_measured"]
    assert "raised" in cells["raises"]["power"]["not_measured"]
