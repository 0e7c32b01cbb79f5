"""The step spread tells truncation, rounding and a max-switch from noise: a smooth network's HVP with a
0.2 % backward error fails (it was called "noisy" because its step-1e-2 estimate carries truncation),
and a piecewise-linear f's exact-zero HVP passes (its first reference crossed max-switches, or its
second differences are lost in rounding of f) instead of being called noisy or unreliable."""
from __future__ import annotations

import numpy as np
import pytest

import gradci
from gradci import Scenario
from gradci._testing.planted import torch_elementwise
from gradci.scenarios.reference.answer import ReferenceCache

torch = pytest.importorskip("torch")


def oscillating(rule_scale: float) -> Scenario:
    """Σ w·sin(20x) at x of size 3, its backward rule scaled: smooth, but its estimate at a step of 1e-2 of
    x's size carries a truncation of 1e-3 relative, which was taken for noise and hid a 0.2 % error."""
    sin = torch_elementwise(lambda y: torch.sin(20 * y), lambda y: 20 * torch.cos(20 * y), backward_scale=rule_scale)
    weights = np.cos(np.arange(8) * 0.7 + 0.3)
    return Scenario(f"oscillating-{rule_scale}", "hvp",
                    {"torch": lambda x: torch.sum(sin(x) * torch.as_tensor(weights, dtype=x.dtype))},
                    3 * np.random.default_rng(1).standard_normal(8))


@pytest.mark.parametrize("rule_scale, status", [(1.0, "pass"), (1.002, "fail")])
def test_a_small_error_in_a_smooth_hvp_fails_and_is_not_called_noise(rule_scale, status):
    (found,) = gradci.check([oscillating(rule_scale)], backends=["torch-rev"], devices=["cpu"], dtypes=["float64"],
                            references=ReferenceCache()).cells
    assert found.status == status, found
    assert "noisy" not in found.message and "differentiable" not in found.message, found.message


def hinge_with_max(x):
    """max(x) plus a leaky ramp: piecewise linear, its Hessian exactly 0."""
    xp = gradci.namespace(x)
    return xp.max(x) + xp.sum(xp.maximum(x, 0.1 * x))


def shifted_abs(x):
    xp = gradci.namespace(x)
    return 10.0 * xp.sum(xp.abs(x - 0.2)) + 100.0


@pytest.mark.parametrize("f, size, offset", [
    (hinge_with_max, 30, 0.37),    # second differences lost in rounding: was "reference unreliable"
    (shifted_abs, 30, 0.37),       # the first reference crossed kinks: was "f is noisy"
    (hinge_with_max, 100, 0.0021),
])
def test_a_piecewise_linear_hvp_of_exactly_zero_passes(f, size, offset):
    s = Scenario(f"{f.__name__}-{size}", "hvp", f, np.linspace(-1.0, 1.3, size) + offset)
    cells = gradci.check([s], backends=["torch-rev", "jax-rev"], devices=["cpu"], dtypes=["float64", "float32"],
                         references=ReferenceCache()).cells
    assert all(c.status == "pass" for c in cells), [(c.backend, c.dtype, c.status, c.message) for c in cells]


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_a_piecewise_linear_hvp_of_exactly_zero_passes_along_every_direction(dtype):
    """The probe directions are seeded by the scenario's name: one in ten reached the leaky ramp's kink (an
    element 1e-3 from 0) at a step of 1e-3, and the second reference, from 1e-4 down to 2.5e-5 of x's size,
    was lost in f's rounding (eps·|f|/step², |f| ≈ 36): "reference unreliable" for an exact zero. Name 81's
    first reference agreed with the small steps but, rounded as much, could not decide either."""
    x = np.linspace(-1.0, 1.3, 100) + 0.0021
    names = [f"hinge_with_max-100-{seed}" for seed in [*range(20), 81]]
    cells = gradci.check([Scenario(name, "hvp", hinge_with_max, x) for name in names], backends=["torch-rev"],
                         devices=["cpu"], dtypes=[dtype], references=ReferenceCache()).cells
    failing = [f"{c.scenario}: {c.status.value}, {c.message[:50]}" for c in cells if c.status != "pass"]
    assert len(cells) == len(names) and not failing, failing


def test_a_wrong_hvp_of_a_piecewise_linear_f_still_fails():
    s = Scenario("shifted-abs-wrong", "hvp", {"torch": lambda x: torch.sum(torch.abs(x - 0.2)) + 1e-3 * torch.sum(
        x ** 2).detach()}, np.linspace(-1.0, 1.3, 30) + 0.37)
    (found,) = gradci.check([s], backends=["torch-rev"], devices=["cpu"], dtypes=["float64"],
                            references=ReferenceCache()).cells
    assert found.status == "fail", found


def cubic_beside_a_large_constant(rule_scale: float) -> Scenario:
    """1e6 + Σ w·x³/6, its backward rule scaled: the Hessian (w·x) is about 1 where |f| is 1e6.

    The float64 rounding floor a second-order reference is held to (16·eps·|f| / (2.5e-4)², about 0.06
    here) is for judging the reference, not the result: were it added to the comparison's allowance, a
    5 % error in these second derivatives would pass.
    """
    cube = torch_elementwise(lambda y: y ** 3 / 6, lambda y: y * y / 2, backward_scale=rule_scale)
    weights = np.cos(np.arange(6) * 0.7 + 0.3)
    return Scenario(f"cubic-offset-{rule_scale}", "hvp",
                    {"torch": lambda x: 1e6 + torch.sum(cube(x) * torch.as_tensor(weights, dtype=x.dtype))},
                    np.linspace(0.6, 1.4, 6))


@pytest.mark.parametrize("rule_scale, status", [(1.0, "pass"), (1.05, "fail")])
def test_a_large_f_does_not_hide_an_error_in_its_small_second_derivatives(rule_scale, status):
    (found,) = gradci.check([cubic_beside_a_large_constant(rule_scale)], backends=["torch-rev"], devices=["cpu"],
                            dtypes=["float64"], references=ReferenceCache()).cells
    assert found.status == status, found
