"""Noise is never a verdict: where finite differences wander with the step (f jagged at the
step's scale, as an iterative solver or a sampled approximation is), a correct rule is an error
that says so, never a fail; a wrong rule under the same noise still fails; a smooth f is decided as
before."""
from __future__ import annotations

import numpy as np
import pytest

import gradci
from gradci import Scenario
from gradci.scenarios.reference.answer import ReferenceCache

torch = pytest.importorskip("torch")


def solver(rule_scale: float, noise: float, wavelength: float = 1e-5):
    """sin(x) plus a wiggle of ``noise`` at ``wavelength``, which its hand-written backward ignores
    (as implicit differentiation ignores a solver's stopping error); the rule scaled by ``rule_scale``."""

    class Solve(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return torch.sin(x) + noise * torch.sin(x / wavelength).detach() ** 3

        @staticmethod
        def backward(ctx, grad):
            (x,) = ctx.saved_tensors
            return grad * rule_scale * torch.cos(x)

    return Solve


def cell(rule_scale: float, noise: float, wavelength: float = 1e-5, dtype: str = "float64"):
    solve = solver(rule_scale, noise, wavelength)
    s = Scenario("solver", "gradient", {"torch": lambda x: torch.sum(solve.apply(x) * torch.arange(1, 4, dtype=x.dtype))},
                 np.array([0.3, -0.9, 1.4]))
    (found,) = gradci.check([s], backends=["torch-rev"], devices=["cpu"], dtypes=[dtype], references=ReferenceCache()).cells
    return found


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_a_correct_rule_on_a_noisy_function_is_an_error_never_a_fail(dtype):
    found = cell(1.0, noise=1e-6, dtype=dtype)
    assert found.status == "error", found
    assert "f is noisy" in found.message and "give an analytic reference or a smoother point" in found.message
    # the evidence: each step with its estimate
    assert all(f"at step {step:g} (±" in found.message for step in (1e-2, 1e-3, 1e-4, 1e-5)), found.message
    # and its margin: the wander beyond what truncation and rounding of a smooth f explain
    assert "beyond what truncation and rounding of a smooth f explain" in found.message, found.message


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_a_wrong_rule_under_the_same_noise_still_fails(dtype):
    found = cell(1.5, noise=1e-6, dtype=dtype)
    assert found.status == "fail", found


def test_a_wiggle_at_the_steps_scale_is_no_noise():
    """A feature of f far above the step's scale is f's own derivative: a rule that ignores it is wrong."""
    assert cell(1.0, noise=1e-6, wavelength=0.1).status == "fail"


def test_a_smooth_function_is_decided_as_before():
    assert cell(1.0, noise=0.0).status == "pass"
    assert cell(1.001, noise=0.0).status == "fail"


def sampled(rule_scale: float):
    """sin(x) plus a fresh 1e-6 jitter at every call (a Monte Carlo estimate), its rule scaled."""
    rng = np.random.default_rng(0)

    class Sampled(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return torch.sin(x) + 1e-6 * float(rng.standard_normal())

        @staticmethod
        def backward(ctx, grad):
            (x,) = ctx.saved_tensors
            return grad * rule_scale * torch.cos(x)

    return Sampled


@pytest.mark.parametrize("rule_scale", [1.0, 1.0001])
def test_an_irreproducible_function_is_never_decided(rule_scale):
    f = sampled(rule_scale)
    s = Scenario("sampled", "gradient", {"torch": lambda x: torch.sum(f.apply(x))}, np.array([0.3, 0.5]))
    (found,) = gradci.check([s], backends=["torch-rev"], devices=["cpu"], dtypes=["float64"],
                            references=ReferenceCache()).cells
    assert found.status == "error", found


def leaky(x):
    xp = gradci.namespace(x)
    return xp.sum(xp.where(x > 0, x, 0.5 * x) * xp.asarray([1.0, 2.0], dtype=x.dtype))


def test_a_kink_says_f_may_not_be_differentiable_with_both_one_sided_values():
    """At the kink the backends answer 0.5 (a subgradient) and central differences 0.75: no fail,
    an error that names the kink and both sides."""
    cells = gradci.check([Scenario("kink", "gradient", leaky, np.array([0.0, 1.0]))], backends=["torch-rev", "jax-rev"],
                         devices=["cpu"], dtypes=["float64"]).cells
    for found in cells:
        assert found.status == "error", found
        assert "may not be differentiable" in found.message
        assert "0.5 from the left" in found.message and "1 from the right" in found.message


def test_away_from_the_kink_the_derivative_is_decided():
    assert gradci.check([Scenario("near-kink", "gradient", leaky, np.array([1e-3, 1.0]))], backends=["torch-rev"],
                        devices=["cpu"], dtypes=["float64"]).ok


def test_the_step_spread_along_a_probe_is_taken_at_its_own_steps():
    """Line probes took the default step 0.05 whatever step the spread asked for: four equal estimates,
    and one-sided 'kink' stencils at 0.05 whose gap is curvature. Each step must give its own."""
    from gradci.scenarios.reference.finite_differences import compute_references
    from gradci.scenarios.reference.step_spread import step_spread

    def curved(x):
        xp = gradci.namespace(x)
        return xp.sum(xp.exp(3.0 * x))

    s = Scenario("curved", "gradient", curved, np.linspace(-1.0, 1.0, 40))  # 40 elements: probes
    tangent, refs = compute_references(s)
    spread = step_spread(s, tangent, refs)
    assert not refs[0].is_full
    assert len(set(spread.worst_estimates)) == 4, spread.worst_estimates
    assert spread.kink is None
