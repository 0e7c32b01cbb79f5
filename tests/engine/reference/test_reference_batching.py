"""References at the speed of the check: stencil points evaluated in one batched call where f allows
it (jit of vmap for jax, torch.func.vmap for torch), the loop where it does not; evaluations shared
across the operators of one function; one-sided stencils element by element."""
from __future__ import annotations

import numpy as np
import pytest

from gradci import Scenario
from gradci.scenarios.reference.answer import ReferenceCache
from gradci.scenarios.reference.finite_differences import compute_references
from gradci.scenarios.reference.stencils import BATCHING_ENV, batched_function

X = np.array([0.3, -0.7, 1.2, 0.5])


def references(scenario, monkeypatch, batching: str):
    monkeypatch.setenv(BATCHING_ENV, batching)
    return compute_references(scenario)[1]


def smooth_jax(x):
    import jax.numpy as jnp

    return jnp.sum(jnp.tanh(x) * jnp.exp(x / 3)) + jnp.prod(jnp.cos(x))


def smooth_torch(x):
    import torch

    return (torch.tanh(x) * torch.exp(x / 3)).sum() + torch.cos(x).prod()


@pytest.mark.parametrize("framework, f", [("jax", smooth_jax), ("torch", smooth_torch)])
@pytest.mark.parametrize("operator", ["gradient", "hvp", "hessian", "jacobian"])
def test_batched_and_looped_references_agree(framework, f, operator, monkeypatch):
    s = Scenario(f"smooth-{framework}/{operator}", operator, {framework: f}, X)
    looped = references(s, monkeypatch, "off")
    batched = references(s, monkeypatch, "on")
    assert batched_function(s) is not None, "the batched call was refused: the comparison tests nothing"
    for a, b in zip(looped, batched):
        scale = np.max(np.abs(a.full))
        np.testing.assert_allclose(b.full, a.full, atol=1e-9 * scale)
        np.testing.assert_array_less(b.full_error, 1e-7 * scale)


def edges(x):
    """sqrt(x0) + sqrt(-x1) + Σ sqrt(x2:), raising outside its domain: x0 needs forward stencils, x1
    backward ones, the rest central ones."""
    import torch

    if x[0] < 0 or x[1] > 0:  # data-dependent control flow: torch.func.vmap refuses it
        raise ValueError("outside the domain")
    return torch.sqrt(x[0]) + torch.sqrt(-x[1]) + torch.sqrt(x[2:]).sum()


EDGE_X = np.array([1e-9, -1e-9, 1.0, 2.0])


def test_function_raising_at_some_stencil_points_gets_an_accurate_reference_element_by_element(monkeypatch):
    s = Scenario("edges", "gradient", {"torch": edges}, EDGE_X)
    (reference,) = references(s, monkeypatch, "on")
    exact = np.array([0.5, -0.5, 0.5, 0.5]) / np.sqrt(np.abs(EDGE_X))
    np.testing.assert_allclose(reference.full, exact, rtol=1e-8)
    assert batched_function(s) is None  # raised under vmap: the loop, where one point's raise is one NaN


def test_sqrt_next_to_its_domain_edge_is_accurate_for_every_element(monkeypatch):
    x = np.array([1e-9, 1.0, 1.0])
    s = Scenario("sqrt-edge", "gradient", {"jax": lambda x: __import__("jax").numpy.sqrt(x).sum()}, x)
    (reference,) = references(s, monkeypatch, "on")
    np.testing.assert_allclose(reference.full, 0.5 / np.sqrt(x), rtol=1e-9)


def branching_jax(x):
    import jax.numpy as jnp

    if x[0] > 0:  # Python control flow on a value: jit cannot trace it
        return jnp.sum(x ** 3)
    return jnp.sum(x)


def test_python_control_flow_on_values_falls_back_to_the_loop(monkeypatch):
    s = Scenario("branching", "gradient", {"jax": branching_jax}, X)
    (reference,) = references(s, monkeypatch, "on")
    np.testing.assert_allclose(reference.full, 3 * X ** 2, rtol=1e-9)
    assert batched_function(s) is None


def seeded_torch(x):
    import torch

    noise = torch.randn(x.shape, generator=torch.Generator().manual_seed(0), dtype=x.dtype)
    return (x * x * noise).sum()


def seeded_jax(x):
    import jax

    return (x * x * jax.random.normal(jax.random.key(0), x.shape)).sum()


@pytest.mark.parametrize("framework, f", [("torch", seeded_torch), ("jax", seeded_jax)])
def test_seeded_randomness_gives_the_same_reference_batched_or_looped(framework, f, monkeypatch):
    s = Scenario(f"seeded-{framework}", "gradient", {framework: f}, X)
    (looped,) = references(s, monkeypatch, "off")
    (batched,) = references(s, monkeypatch, "on")
    assert batched_function(s) is not None  # the seeded draw is batched, not refused
    np.testing.assert_allclose(batched.full, looped.full, rtol=1e-10)


def unseeded_torch(x):
    import torch

    return (x * x * torch.randn(x.shape, dtype=x.dtype)).sum()  # a fresh draw at every call


def test_a_batched_call_that_disagrees_with_the_loop_is_refused(monkeypatch):
    # vmap draws once for all points ("same"); the loop draws per point: the validation sees it
    s = Scenario("unseeded", "gradient", {"torch": unseeded_torch}, X)
    monkeypatch.setenv(BATCHING_ENV, "on")
    try:
        compute_references(s)
    except Exception:  # noqa: BLE001 - a noisy function may have no reference; only the refusal matters
        pass
    assert batched_function(s) is None


def halving_state(x, running):
    running.mul_(0.5)  # updates declared state in place (vmap allows it: no batched value involved)
    return (x * x).sum() * running.sum()


def test_state_starts_from_its_declared_value_at_every_batched_call(monkeypatch):
    s = Scenario("halving", "gradient", {"torch": halving_state}, X, contexts=(np.array([1.0, 3.0]),), state=(0,))
    (reference,) = references(s, monkeypatch, "on")
    assert batched_function(s) is not None
    np.testing.assert_allclose(reference.full, 2 * X * 2.0, rtol=1e-9)


def square_sum(x):
    import jax.numpy as jnp

    return jnp.sum(x * x)


def operators_of(f, name="f", contexts=()):
    return [Scenario(f"{name}/{op}", op, {"jax": f}, X, contexts=contexts) for op in ("gradient", "hvp", "hessian")]


def test_evaluations_are_shared_across_the_operators_of_one_function(monkeypatch):
    monkeypatch.setenv(BATCHING_ENV, "on")
    cache = ReferenceCache()
    gradient, hvp, hessian = operators_of(square_sum)
    cache.answer(gradient)
    before = cache.memo.hits
    cache.answer(hvp)
    cache.answer(hessian)
    assert cache.memo.hits > before
    assert cache.answer(hessian).refs[0].full == pytest.approx(2 * np.eye(4), abs=1e-7)


def scaled(c):
    import jax.numpy as jnp

    return lambda x: c * jnp.sum(x * x)


def weighted(x, c):
    import jax.numpy as jnp

    return jnp.sum(c * x * x)


def test_evaluations_are_not_shared_between_functions_differing_in_a_closure_constant_or_context(monkeypatch):
    monkeypatch.setenv(BATCHING_ENV, "on")
    cache = ReferenceCache()
    for c in (1.0, 2.0):
        for s in operators_of(scaled(c), f"scaled-{c}")[:1] + operators_of(weighted, f"weighted-{c}",
                                                                             (np.array(c),))[:1]:
            (reference,) = cache.answer(s).refs
            np.testing.assert_allclose(reference.full, 2 * c * X, rtol=1e-9)
