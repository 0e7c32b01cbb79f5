"""A copy of a real library's repository with gradci scenarios: torchdiffeq, for the affected-cells bench.

``make_repository(root)`` copies torchdiffeq's installed source (a test dependency of gradci: nothing is
fetched) into a new git repository with a scenarios package and a gradci.toml, as a torchdiffeq
developer using gradci would have it, and commits it. ``change_one_rule`` and ``change_docs`` then
commit the two kinds of pull request the bench times: an edit of the adjoint method's hand-written
backward (``OdeintAdjointMethod.backward``: what a change to one rule re-runs), and an edit of the
README only.

The scenarios: the gradient of a final state's loss through ``odeint`` with each of its solvers (their
Python runs in every cell: nothing of theirs is a custom rule) at three sizes, and through ``odeint_adjoint``,
whose backward is the rule: 20 scenarios, 2 of them through the rule.
"""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import torchdiffeq

# The low-order adaptive solvers (bosh3, adaptive_heun, fehlberg2) take thousands of steps at float64's
# tolerance, and dopri8's accept/reject switches lie within a reference's reach: left out.
SOLVERS = ("dopri5", "rk4", "euler", "midpoint", "explicit_adams", "implicit_adams")
SIZES = (2, 4, 8)
ADJOINT_SOLVERS = ("dopri5", "rk4")
RULE_FILE = "torchdiffeq/_impl/adjoint.py"

SCENARIOS = '''\
"""torchdiffeq's solvers and its adjoint method, checked by gradci."""
import numpy as np
import torch

import torchdiffeq
from gradci import Scenario

SOLVERS = {solvers!r}
SIZES = {sizes!r}
ADJOINT_SOLVERS = {adjoint!r}
FIXED_STEP = ("rk4", "euler", "midpoint", "explicit_adams", "implicit_adams")


class Field(torch.nn.Module):
    def __init__(self, n):
        super().__init__()
        torch.manual_seed(n)
        self.linear = torch.nn.Linear(n, n)

    def forward(self, t, y):
        return torch.tanh(self.linear(y)) - 0.3 * y


def final_loss(solve, method, field):
    def loss(y0):
        times = torch.tensor([0.0, 0.5, 1.0], dtype=y0.dtype)
        tol = 1e-9 if y0.dtype == torch.float64 else 1e-5
        options = {{"step_size": 0.05}} if method in FIXED_STEP else None
        ys = solve(field, y0, times, rtol=tol, atol=tol, method=method, options=options)
        return torch.sum(ys[-1] ** 2)
    return loss


def scenarios():
    found = []
    for n in SIZES:
        y0 = np.linspace(-0.8, 0.9, n)
        for method in SOLVERS:
            found.append(Scenario(f"odeint/{{method}}/n{{n}}", "gradient",
                                  {{"torch": final_loss(torchdiffeq.odeint, method, Field(n))}}, y0))
    y0 = np.linspace(-0.8, 0.9, 2)
    for method in ADJOINT_SOLVERS:  # the adjoint method's backward is the library's hand-written rule
        found.append(Scenario(f"odeint_adjoint/{{method}}/n2", "gradient",
                              {{"torch": final_loss(torchdiffeq.odeint_adjoint, method, Field(2))}}, y0))
    return found
'''

CONFIG = '''\
[scenarios]
modules = ["gradci_scenarios.ode"]

[matrix]
backends = ["torch-rev"]
dtypes = ["float64", "float32"]
'''


def make_repository(root: Path) -> str:
    """A git repository at ``root``: torchdiffeq's source, its scenarios, gradci.toml; the commit's sha."""
    source = Path(torchdiffeq.__file__).resolve().parent
    shutil.copytree(source, root / "torchdiffeq", ignore=shutil.ignore_patterns("__pycache__"))
    (root / "gradci_scenarios").mkdir()
    (root / "gradci_scenarios" / "__init__.py").write_text("")
    (root / "gradci_scenarios" / "ode.py").write_text(SCENARIOS.format(solvers=SOLVERS, sizes=SIZES, adjoint=ADJOINT_SOLVERS))
    (root / "gradci.toml").write_text(CONFIG)
    (root / "README.md").write_text("# torchdiffeq\n\nDifferentiable ODE solvers (a copy, for gradci's bench).\n")
    _git(root, "init", "-q", "-b", "main")
    return commit(root, "torchdiffeq with gradci scenarios")


def change_one_rule(root: Path, number: int | str = 0) -> str:
    """Edit the adjoint method's backward (a no-op in value, a change in code): its cells must re-run.

    ``number`` makes each such commit a commit of its own.
    """
    anchor = "    def backward(ctx, *grad_y):\n"
    replace_once(root / RULE_FILE, anchor, anchor + f"        grad_y = tuple(g * 1.0 for g in grad_y)  # {number}\n",
                 "torchdiffeq's adjoint backward")
    return commit(root, f"adjoint: scale the incoming gradients (a no-op, {number})")


def replace_once(path: Path, anchor: str, replacement: str, what: str) -> None:
    """Put ``replacement`` where ``anchor`` stands in the file, which must hold it exactly once."""
    text = path.read_text()
    assert text.count(anchor) == 1, f"{what} changed shape: update the bench"
    path.write_text(text.replace(anchor, replacement))


def change_docs(root: Path, number: int = 0) -> str:
    with (root / "README.md").open("a") as readme:
        readme.write(f"\nSee the paper for the adjoint method ({number}).\n")
    return commit(root, f"README: a line ({number})")


def commit(root: Path, message: str) -> str:
    _git(root, "add", "-A")
    _git(root, "-c", "user.name=bench", "-c", "user.email=bench@example.com", "commit", "-q", "-m", message)
    return _git(root, "rev-parse", "HEAD").strip()


def _git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True, text=True).stdout
