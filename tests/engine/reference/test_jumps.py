"""Close to a jump of f (ceil, floor, round, sign, a step in user code), the reference steps around
it: every backend passes, or the cell is an honest error that names the jump, never a false fail
and never gradci's own error."""
from __future__ import annotations

import numpy as np
import pytest

import gradci
from gradci import Scenario
from gradci._testing.planted import torch_elementwise
from gradci.scenarios.reference.answer import ReferenceCache

pytest.importorskip("torch")
pytest.importorskip("jax")

BACKENDS = ["jax-rev", "jax-rev-jit", "jax-fwd", "torch-rev", "torch-func-rev", "torch-func-fwd", "fd"]
DISTANCES = [1e-1, 1e-2, 1e-3, 1e-4, 1e-5, 1e-6]


def user_step(x):
    xp = gradci.namespace(x)
    return xp.where(x > 0.25, xp.ones_like(x), xp.zeros_like(x)) * 3.0


STAIRS = {  # each: the piecewise-constant function and where it jumps
    "ceil": (lambda x: gradci.namespace(x).ceil(x), 1.0),
    "floor": (lambda x: gradci.namespace(x).floor(x), 1.0),
    "round": (lambda x: gradci.namespace(x).round(x), 0.5),
    "sign": (lambda x: gradci.namespace(x).sign(x), 0.0),
    "user-step": (user_step, 0.25),
}


def near_the_jump(name: str, distance: float, size: int) -> np.ndarray:
    """``size`` points: the first ``distance`` right of the jump, the others spread between jumps."""
    at = STAIRS[name][1]
    x = at + 0.3 + 0.4 * np.linspace(0.0, 1.0, size)
    x[0] = at + distance
    return x


def elementwise(name: str, distance: float) -> Scenario:
    stair = STAIRS[name][0]
    return Scenario(f"{name}-at-{distance:g}", "jacobian",
                    lambda x: stair(x) + 0.5 * x, near_the_jump(name, distance, 3))


def summed(name: str, distance: float) -> Scenario:
    """The gradient of a sum through the stair on 40 elements: random probes, not a full reference."""
    stair = STAIRS[name][0]
    return Scenario(f"sum-{name}-at-{distance:g}", "gradient",
                    lambda x: gradci.namespace(x).sum(stair(x) * x), near_the_jump(name, distance, 40))


def honest(cell) -> bool:
    return cell.status == "pass" or (cell.status == "error" and "f has a jump at about x" in cell.message)


@pytest.mark.parametrize("name", sorted(STAIRS))
@pytest.mark.parametrize("make", [elementwise, summed])
def test_close_to_a_jump_every_cell_passes_or_names_the_jump(name, make):
    scenarios = [make(name, d) for d in DISTANCES]
    cells = gradci.check(scenarios, backends=BACKENDS, devices=["cpu"], dtypes=["float64", "float32"],
                         references=ReferenceCache()).cells
    judged = [c for c in cells if c.status != "skip"]
    assert judged
    wrong = [(c.scenario, c.backend, c.dtype, c.status, c.message) for c in judged if not honest(c)]
    assert not wrong, wrong


def holed(x):
    """0 within 3e-9 of 1, 2x right of it and 3x left: jumps on both sides of x = 1, closer than any step
    can go (and unequal, so that a central stencil, which never evaluates f at x, sees them too)."""
    xp = gradci.namespace(x)
    outside = xp.where(x > 1.0, 2.0 * x, 3.0 * x)
    return xp.sum(xp.where(xp.abs(x - 1.0) < 3e-9, xp.zeros_like(x), outside))


def test_a_jump_too_close_to_step_around_is_named_with_its_distance():
    cells = gradci.check([Scenario("hole", "gradient", holed, np.array([1.0, 0.5]))],
                         backends=["torch-rev", "jax-rev"], devices=["cpu"], dtypes=["float64"],
                         references=ReferenceCache()).cells
    for found in cells:
        assert found.status == "error", found
        assert "f has a jump at about x" in found.message and "3e-09" in found.message, found.message


def test_a_wrong_rule_beside_a_jump_still_fails():
    """The reference steps around the jump and decides: a planted 2 % error is not excused by the jump."""
    import torch

    wrong = torch_elementwise(lambda x: torch.floor(x) + torch.sin(x), torch.cos, backward_scale=1.02)
    s = Scenario("floor-sin", "gradient", {"torch": lambda x: torch.sum(wrong(x))}, np.array([1.0 + 1e-4, 1.6]))
    (found,) = gradci.check([s], backends=["torch-rev"], devices=["cpu"], dtypes=["float64"],
                            references=ReferenceCache()).cells
    assert found.status == "fail", found
