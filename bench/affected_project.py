"""A copy of a real library's repository with gradci scenarios: torchdiffeq, for the affected-cells bench.

``make_repository(root)`` copies torchdiffeq's installed source (a test dependency of gradci: nothing is
fetched) into a new git repository with a scenarios package and a gradci.toml, as a torchdiffeq
developer using gradci would have it, and commits it. ``change_one_rule`` and ``change_docs`` then
commit the two kinds of pull request the bench times: an edit of one of the library's hand-written
backwards (``RULES``: what a change to one rule re-runs), and an edit of the README only.

The scenarios (``gradci_scenarios/ode.py``: 56, each in float64 and float32 on torch-rev, 112 cells)
mirror torchdiffeq's own gradient tests (tests/gradient_tests.py and tests/event_tests.py on the
problems of tests/problems.py, made smaller: a few times, short spans), so that a full run checks about
as much as the library's suite does and a change to one rule re-runs a small part of it:

- ``odeint/...`` (36): through ``odeint``, with respect to y0 and the times, for each of its solvers
  (7 fixed-step, dopri5) on the constant, linear and sine problems and on the linear one in reverse
  time, dopri5 on the exp problem, 2 with respect to the field's parameters, and the cubic problem of
  TestCompareAdjointGradient. No rule of the library's but ``_UncheckedAssign`` (dopri5's stages) and
  ``_StitchGradient`` (the sine problem's ``perturb``): the solvers' Python runs in every cell;
- ``odeint_adjoint/...`` (16): through ``odeint_adjoint``, whose backward (``OdeintAdjointMethod``) is
  the library's main rule: each solver on the constant problem (test_adjoint), dopri5 on the others
  (test_adjoint_against_odeint), the fields' parameters, explicit ``adjoint_params`` and the seminorm;
- ``odeint_event/...`` (4): the event time and the state there through ``odeint_event``, whose backward
  (``ImplicitFnGradientRerouting``) reroutes the event time's gradient into the state; one of them
  through ``odeint_adjoint`` as well.

The rules ``change_one_rule`` edits (``RULES``): ``event`` (the default), ImplicitFnGradientRerouting's
backward, which the 4 event scenarios' 8 cells run; ``adjoint``, OdeintAdjointMethod's backward, which
the 16 adjoint scenarios and the adjoint event one run, 34 cells. Every other cell is carried.
"""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import NamedTuple

import torchdiffeq

# The low-order adaptive solvers (bosh3, adaptive_heun, fehlberg2) take thousands of steps at float64's
# tolerance, and dopri8's accept/reject switches lie within a reference's reach: left out. (Measured on
# the linear problem: bosh3's gradient is off by 6e-5 at 1e-9 (34 s) and by 6e-6 at 1e-11 (199 s), its
# step sizes chosen under no_grad; dopri8's reference is unreliable, its estimated error 1e-4.)
SCENARIOS = '''\
"""torchdiffeq's gradient tests as gradci scenarios.

They mirror tests/gradient_tests.py, tests/event_tests.py and tests/problems.py of torchdiffeq: the
problems are problems.py's (smaller: a few points, short spans), each gradient is that of a weighted
sum of the solution (the tests' ``ys.backward(gradys)``), and gradci holds it to a finite-difference
reference instead of ``gradcheck`` or a comparison between odeint and odeint_adjoint.

- ``odeint/METHOD/PROBLEM``: through ``odeint``, with respect to y0 and the times, for every solver
  on the constant, linear and sine problems (the sine one time-dependent, with ``perturb``) and on
  the linear one in reverse time (test_odeint's gradcheck), dopri5 on the exp one;
- ``odeint_adjoint/METHOD/constant``: through ``odeint_adjoint`` for every solver (test_adjoint),
  ``odeint_adjoint/dopri5/PROBLEM`` on the others (test_adjoint_against_odeint), ``.../params``
  with respect to the field's parameters, and the cubic problem of TestCompareAdjointGradient with
  explicit ``adjoint_params`` and the seminorm;
- ``odeint_event/...``: through ``odeint_event``, the event time and the state there
  (event_tests.py): its backward is ``ImplicitFnGradientRerouting``'s.

Left out: the low-order adaptive solvers (bosh3, adaptive_heun, fehlberg2), whose step sizes, chosen
under no_grad, leave their gradients off the finite differences' by 1e-5 to 1e-4 (relative) at any
tolerance they finish in; dopri8, whose accept/reject switches lie within a reference's reach; and
scipy_solver, which autograd does not go through.
"""
import math

import numpy as np
import torch

import torchdiffeq
from gradci import Scenario

FIXED = ("euler", "midpoint", "heun2", "heun3", "rk4", "explicit_adams", "implicit_adams")
ADAPTIVE = ("dopri5",)
METHODS = FIXED + ADAPTIVE


class Problem(torch.nn.Module):
    """A field of problems.py, its parameters made in the solve's dtype."""

    def __init__(self, dtype=torch.float64):
        super().__init__()


class ConstantODE(Problem):
    """problems.py's: y = a t + b solves it exactly."""

    def __init__(self, dtype=torch.float64):
        super().__init__()
        self.a = torch.nn.Parameter(torch.tensor(0.2, dtype=dtype))
        self.b = torch.nn.Parameter(torch.tensor(3.0, dtype=dtype))

    def forward(self, t, y):
        return self.a + (y - (self.a * t + self.b)) ** 5

    @staticmethod
    def y_exact(t):
        return 0.2 * t + 3.0


class LinearODE(Problem):
    """problems.py's: y' = A y, A antisymmetric (smaller: 3 dimensions)."""

    def __init__(self, dtype=torch.float64, dim=3):
        super().__init__()
        u = np.random.default_rng(0).standard_normal((dim, dim)) * 0.1
        self.A = torch.nn.Parameter(torch.tensor((2 * u - (u + u.T)).tolist(), dtype=dtype))  # no float64 tensor

    def forward(self, t, y):
        return self.A @ y


class SineODE(Problem):
    """problems.py's: time-dependent, no parameters."""

    def forward(self, t, y):
        return 2 * y / t + t ** 4 * torch.sin(2 * t) - t ** 2 + 4 * t ** 3

    @staticmethod
    def y_exact(t):
        return (-0.5 * t ** 4 * math.cos(2 * t) + 0.5 * t ** 3 * math.sin(2 * t) + 0.25 * t ** 2 * math.cos(2 * t)
                - t ** 3 + 2 * t ** 4 + (math.pi - 0.25) * t ** 2)


class ExpODE(Problem):
    """problems.py's: y' depends on t alone."""

    def forward(self, t, y):
        return (-0.1 * torch.exp(-0.1 * t)).expand_as(y)

    @staticmethod
    def y_exact(t):
        return math.exp(-0.1 * t)


# name: (the field, its times, the fixed-step solvers' step: no whole number of steps between the
# first and the last time, nor a step on a time between, so that a time's finite differences stay on one grid)
PROBLEMS = {
    "constant": (ConstantODE, np.linspace(1.0, 4.0, 4), 0.35),
    "linear": (LinearODE, np.linspace(1.0, 8.0, 4), 0.3),
    "sine": (SineODE, np.linspace(1.0, 2.0, 3), 0.07),
    "exp": (ExpODE, np.linspace(1.0, 8.0, 4), 0.3),
}


def initial(problem, t0):
    """The exact solution at t0, where problems.py's construct_problem starts (two copies of a scalar one)."""
    return np.full(2, PROBLEMS[problem][0].y_exact(t0)) if problem != "linear" else np.ones(3)


def solver_arguments(method, dtype, step_size=0.3, tighter=1.0, **fixed):
    """odeint's keywords for ``method`` in ``dtype``: the fixed-step solvers' step and ``fixed`` options
    (perturb, interp), the adaptive ones' tolerance (``tighter`` times 1e-9 in float64, 1e-5 in
    float32). The adaptive step sizes are chosen under no_grad: autograd holds them fixed where finite
    differences move them, a difference of the order of the tolerance that 1e-9 keeps below float64's."""
    tol = (1e-9 if dtype == torch.float64 else 1e-5) * tighter
    options = {"step_size": step_size, **fixed} if method in FIXED else None
    return {"method": method, "rtol": tol, "atol": tol, "options": options}


def weighted(ys):
    """The tests' ``ys.backward(gradys)`` with a fixed gradys."""
    weights = torch.linspace(0.3, 1.1, ys.numel(), dtype=ys.dtype).reshape(ys.shape)
    return torch.sum(ys * weights)


def through(solve, problem, method, reverse=False, **options):
    field, _, step_size = PROBLEMS[problem]

    def loss(y0, t):
        func = field(y0.dtype)
        if reverse:
            t = torch.flip(t, (0,))
        return weighted(solve(func, y0, t, **solver_arguments(method, y0.dtype, step_size, **options)))
    return loss


def through_parameters(solve, problem, method):
    _, times, step_size = PROBLEMS[problem]

    def loss(func, y0, t):
        return weighted(solve(func, y0, t, **solver_arguments(method, y0.dtype, step_size)))
    return loss, times


class CubicODE(torch.nn.Module):
    """TestCompareAdjointGradient's: y' = y³ A, with a module it never uses."""

    def __init__(self, a):
        super().__init__()
        self.A = a
        self.unused_module = torch.nn.Linear(2, 5, dtype=a.dtype, device="meta")  # no memory, no random draw

    def forward(self, t, y):
        return torch.mm(y ** 3, self.A)


def cubic(solve, method, **adjoint):
    """y0 and A; through the adjoint method with ``adjoint_params=(A,)``: the field's module holds A as a
    plain tensor, which its parameters() leave out."""
    def loss(y0, a):
        t = torch.linspace(0.0, 1.0, 3, dtype=y0.dtype)
        params = {"adjoint_params": (a,)} if solve is torchdiffeq.odeint_adjoint else {}
        return weighted(solve(CubicODE(a), y0, t, **solver_arguments(method, y0.dtype, 0.03), **params, **adjoint))
    return loss


CUBIC = (np.array([[0.7, 0.0]]), np.array([[-0.1, 2.0], [-2.0, -0.1]]))  # y0 [[2, 0]] there, over [0, 25]


def event(problem, method, t0=1.0, span=1.5, reverse=False, interface=torchdiffeq.odeint):
    """event_tests.py's: from the exact solution at t0, solve until the state's sum reaches the exact
    solution's ``span`` later (earlier in reverse time); y0 and t0."""
    field, _, _ = PROBLEMS[problem]
    target = 2 * field.y_exact(t0 - span if reverse else t0 + span)

    def loss(y0, t0):
        arguments = solver_arguments(method, y0.dtype, 0.07, interp="cubic")
        arguments["atol"] = 1e-14 if y0.dtype == torch.float64 else 1e-7  # also the event's bisection tolerance
        event_t, ys = torchdiffeq.odeint_event(field(y0.dtype), y0, t0, reverse_time=reverse,
                                               event_fn=lambda t, y: torch.sum(y) - target,
                                               odeint_interface=interface, **arguments)
        return 0.7 * event_t + torch.sum(ys[-1] * torch.tensor([0.3, -0.5], dtype=y0.dtype))
    return loss, (initial(problem, t0), np.array(t0))


def scenarios():
    found = []

    def add(name, f, x, **keywords):
        if isinstance(x, tuple):  # y0 and the times, y0 and A: each an argument of f
            keywords["wrt"] = tuple(range(len(x)))
        found.append(Scenario(name, "gradient", {"torch": f}, x, **keywords))

    # tests/gradient_tests.py, test_odeint: y0 and the times, every solver, each problem
    for problem in ("constant", "linear", "sine"):
        times = PROBLEMS[problem][1]
        perturb = problem == "sine"  # time-dependent: the fixed-step solvers' evaluations nudged off the grid's times
        for method in METHODS:
            add(f"odeint/{method}/{problem}", through(torchdiffeq.odeint, problem, method, perturb=perturb),
                (initial(problem, times[0]), times))
    for method in METHODS:  # construct_problem's reverse=True (odeint_tests.py)
        times = PROBLEMS["linear"][1]
        add(f"odeint/{method}/linear/reverse", through(torchdiffeq.odeint, "linear", method, reverse=True),
            (initial("linear", times[-1]), times))
    times = PROBLEMS["exp"][1]
    add("odeint/dopri5/exp", through(torchdiffeq.odeint, "exp", "dopri5"), (initial("exp", times[0]), times))
    # test_adjoint: every solver through the adjoint method (on the constant problem, whose adjoint and
    # discrete gradients agree for any step)
    for method in METHODS:
        times = PROBLEMS["constant"][1]
        add(f"odeint_adjoint/{method}/constant", through(torchdiffeq.odeint_adjoint, "constant", method),
            (initial("constant", times[0]), times))
    # test_adjoint_against_odeint: dopri5 at a tight tolerance on the other problems, y0 and the times,
    # and the fields' parameters through both
    for problem in ("linear", "sine", "exp"):
        times = PROBLEMS[problem][1]
        # exp's few long steps: a time's adjoint is f there, a finite difference's the interpolant's slope
        tighter = 0.1 if problem == "exp" else 1.0
        add(f"odeint_adjoint/dopri5/{problem}", through(torchdiffeq.odeint_adjoint, problem, "dopri5", tighter=tighter),
            (initial(problem, times[0]), times))
    times = PROBLEMS["linear"][1]
    add("odeint_adjoint/dopri5/linear/reverse", through(torchdiffeq.odeint_adjoint, "linear", "dopri5", reverse=True),
        (initial("linear", times[-1]), times))
    for solve in (torchdiffeq.odeint, torchdiffeq.odeint_adjoint):
        for problem in ("constant", "linear"):
            loss, times = through_parameters(solve, problem, "dopri5")
            y0 = torch.tensor(initial(problem, times[0]))
            add(f"{solve.__name__}/dopri5/{problem}/params", loss, PROBLEMS[problem][0](),
                contexts=(y0, torch.tensor(times)))
    # TestCompareAdjointGradient: a field that is no nn.Module of its parameters' (adjoint_params), the seminorm
    add("odeint/dopri5/cubic", cubic(torchdiffeq.odeint, "dopri5"), CUBIC)
    add("odeint_adjoint/dopri5/cubic/adjoint_params", cubic(torchdiffeq.odeint_adjoint, "dopri5"), CUBIC)
    add("odeint_adjoint/dopri5/cubic/seminorm",
        cubic(torchdiffeq.odeint_adjoint, "dopri5", adjoint_options={"norm": "seminorm"}), CUBIC)
    # tests/event_tests.py: the event time and the state there, through ImplicitFnGradientRerouting
    for name, problem, method, keywords in (
            ("odeint_event/dopri5/constant", "constant", "dopri5", {}),
            ("odeint_event/rk4/constant", "constant", "rk4", {}),
            ("odeint_event/dopri5/sine/reverse", "sine", "dopri5", {"t0": 2.0, "span": 0.5, "reverse": True}),
            ("odeint_event/odeint_adjoint/dopri5/constant", "constant", "dopri5",
             {"interface": torchdiffeq.odeint_adjoint})):
        loss, y0 = event(problem, method, **keywords)
        add(name, loss, y0)
    return found
'''

CONFIG = '''\
[scenarios]
modules = ["gradci_scenarios.ode"]

[matrix]
backends = ["torch-rev"]
dtypes = ["float64", "float32"]
'''


class Rule(NamedTuple):
    """A no-op in value, a change in code, at the top of one of torchdiffeq's hand-written backwards."""

    path: str  # in the repository
    anchor: str  # the backward's signature, exactly once in the file
    line: str  # put after it; ``{number}`` makes each commit one of its own
    message: str  # the commit's


RULES = {
    # ImplicitFnGradientRerouting.backward (odeint_event's): the event scenarios' cells only.
    "event": Rule("torchdiffeq/_impl/odeint.py", "    def backward(ctx, grad_t, grad_state):\n",
                  "        grad_state = grad_state * 1.0  # {number}\n",
                  "odeint_event: scale the state's incoming gradient (a no-op, {number})"),
    # OdeintAdjointMethod.backward: the adjoint scenarios' cells (the adjoint event one's too).
    "adjoint": Rule("torchdiffeq/_impl/adjoint.py", "    def backward(ctx, *grad_y):\n",
                    "        grad_y = tuple(g * 1.0 for g in grad_y)  # {number}\n",
                    "adjoint: scale the incoming gradients (a no-op, {number})"),
}


def make_repository(root: Path) -> str:
    """A git repository at ``root``: torchdiffeq's source, its scenarios, gradci.toml; the commit's sha."""
    source = Path(torchdiffeq.__file__).resolve().parent
    shutil.copytree(source, root / "torchdiffeq", ignore=shutil.ignore_patterns("__pycache__"))
    (root / "gradci_scenarios").mkdir()
    (root / "gradci_scenarios" / "__init__.py").write_text("")
    (root / "gradci_scenarios" / "ode.py").write_text(SCENARIOS)
    (root / "gradci.toml").write_text(CONFIG)
    (root / "README.md").write_text("# torchdiffeq\n\nDifferentiable ODE solvers (a copy, for gradci's bench).\n")
    _git(root, "init", "-q", "-b", "main")
    return commit(root, "torchdiffeq with gradci scenarios")


def change_one_rule(root: Path, number: int | str = 0, rule: str = "event") -> str:
    """Edit one of ``RULES``' backwards (a no-op in value, a change in code): the cells that ran it must re-run.

    ``number`` makes each such commit a commit of its own.
    """
    edit = RULES[rule]
    replace_once(root / edit.path, edit.anchor, edit.anchor + edit.line.format(number=number),
                 f"torchdiffeq's {rule} backward ({edit.path})")
    return commit(root, edit.message.format(number=number))


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
