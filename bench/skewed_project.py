"""A skewed repository for the job-balance bench: a few heavy scenarios among many light ones.

``make_repository(root)`` copies torchdiffeq's installed source (a test dependency of gradci: nothing is
fetched) into a new git repository with a scenarios package and a gradci.toml, and commits it; the
heavy scenarios are listed first, as a module of slow checks often is, so that a cut by count puts
them into one job. The scenarios:

- heavy (``HEAVY``): the gradient of a final state's loss through ``odeint`` with rk4 at a fine step
  (``HEAVY_STEP``) on a state of ``HEAVY_SIZE``: seconds each, most of it the reference's solves;
- light (``LIGHT``): the same through ``odeint`` with a fixed-step solver on a state of two, each
  field seeded differently: a tenth of a second each.
"""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import torchdiffeq

from bench.affected_project import commit

HEAVY = 6
HEAVY_SIZE = 12
HEAVY_STEP = 0.005
LIGHT = 240

SCENARIOS = '''\
"""torchdiffeq under gradci: a few large solves at a fine step, then many small ones."""
import numpy as np
import torch

import torchdiffeq
from gradci import Scenario

HEAVY, HEAVY_SIZE, HEAVY_STEP, LIGHT = {heavy!r}, {heavy_size!r}, {heavy_step!r}, {light!r}
FIXED_STEP = ("euler", "midpoint", "rk4")


class Field(torch.nn.Module):
    def __init__(self, n, seed):
        super().__init__()
        torch.manual_seed(seed)
        self.linear = torch.nn.Linear(n, n)

    def forward(self, t, y):
        return torch.tanh(self.linear(y)) - 0.3 * y


def final_loss(method, field, step):
    def loss(y0):
        times = torch.tensor([0.0, 0.5, 1.0], dtype=y0.dtype)
        ys = torchdiffeq.odeint(field, y0, times, method=method, options={{"step_size": step}})
        return torch.sum(ys[-1] ** 2)
    return loss


def scenarios():
    found = []
    for k in range(HEAVY):
        y0 = np.linspace(-0.8, 0.9, HEAVY_SIZE)
        found.append(Scenario(f"large/rk4/s{{k}}", "gradient",
                              {{"torch": final_loss("rk4", Field(HEAVY_SIZE, k), HEAVY_STEP)}}, y0))
    for k in range(LIGHT):
        method = FIXED_STEP[k % len(FIXED_STEP)]
        found.append(Scenario(f"small/{{method}}/s{{k}}", "gradient",
                              {{"torch": final_loss(method, Field(2, 100 + k), 0.1)}},
                              np.array([-0.5, 0.7])))
    return found
'''

CONFIG = '''\
[scenarios]
modules = ["gradci_scenarios.skewed"]

[matrix]
backends = ["torch-rev"]
dtypes = ["float64", "float32"]
'''


def make_repository(root: Path, heavy: int = HEAVY, heavy_size: int = HEAVY_SIZE, heavy_step: float = HEAVY_STEP,
                    light: int = LIGHT) -> str:
    """A git repository at ``root``: torchdiffeq's source, the skewed scenarios, gradci.toml; its sha."""
    source = Path(torchdiffeq.__file__).resolve().parent
    shutil.copytree(source, root / "torchdiffeq", ignore=shutil.ignore_patterns("__pycache__"))
    (root / "gradci_scenarios").mkdir()
    (root / "gradci_scenarios" / "__init__.py").write_text("")
    (root / "gradci_scenarios" / "skewed.py").write_text(
        SCENARIOS.format(heavy=heavy, heavy_size=heavy_size, heavy_step=heavy_step, light=light))
    (root / "gradci.toml").write_text(CONFIG)
    (root / "README.md").write_text("# torchdiffeq\n\nA skewed set of gradci scenarios (a copy, for gradci's bench).\n")
    subprocess.run(["git", "-C", str(root), "init", "-q", "-b", "main"], check=True, capture_output=True)
    return commit(root, "torchdiffeq with skewed gradci scenarios")
