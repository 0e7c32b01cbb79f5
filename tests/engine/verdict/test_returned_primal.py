"""The primal an operator's transform returns beside the derivative must be f(x).

A custom rule can return another primal than the function: a jax.custom_vjp whose fwd, or a
custom_jvp rule whose primal output, is not the function's value. The derivative may be right and
the value the user's code goes on with wrong; only the primal that jax.vjp, jax.jvp (and torch's
vjp and jvp) return shows it.
"""
from __future__ import annotations

import pytest

import gradci
from gradci._testing import planted

JAX = ["jax-rev", "jax-rev-jit", "jax-fwd"]
TORCH = ["torch-rev", "torch-func-rev", "torch-func-fwd", "torch-fwd"]
SHIFT = 1e-2  # beyond float32's value tolerance too


def scenario(name, framework, sin_fn, operator):
    return planted.scenario(name, framework, sin_fn, operator, dtypes=("float64", "float32"))


def cells(scenario, backends, dtypes=("float64", "float32")):
    report = gradci.check([scenario], backends=backends, devices=["cpu"], dtypes=list(dtypes))
    return report.cells


@pytest.mark.parametrize("operator", ["vjp", "jvp", "jacobian"])
def test_custom_vjp_whose_fwd_returns_another_primal_fails_reverse_cells(operator):
    bad = scenario(f"sin/vjp-fwd-shifted/{operator}", "jax", planted.jax_sin_vjp(primal_shift=SHIFT),
                           operator)
    for cell in cells(bad, JAX):
        if cell.backend == "jax-fwd":
            assert cell.status == "error", cell.message  # a custom_vjp has no forward mode
            continue
        assert cell.status == "fail", (cell.backend, cell.dtype, cell.message)
        assert "primal" in cell.message and "differs from f(x)" in cell.message, cell.message
        assert "custom_vjp whose fwd" in cell.message, cell.message


@pytest.mark.parametrize("operator", ["vjp", "jvp", "jacobian", "hvp", "hessian"])
def test_custom_vjp_whose_fwd_returns_the_primal_passes(operator):
    good = scenario(f"sin/vjp/{operator}", "jax", planted.jax_sin_vjp(), operator)
    got = {(c.backend, c.dtype): c.status for c in cells(good, JAX)}
    assert {status for (backend, _), status in got.items() if backend != "jax-fwd"} == {"pass"}, got


def test_the_message_names_the_transform_that_returned_the_primal():
    bad = scenario("sin/vjp-fwd-shifted", "jax", planted.jax_sin_vjp(primal_shift=SHIFT), "vjp")
    cell = next(c for c in cells(bad, ["jax-rev-jit"], ("float64",)))
    assert "the primal that jax.vjp returned differs from f(x)" in cell.message, cell.message


@pytest.mark.parametrize("operator", ["jvp", "vjp", "hvp", "hessian"])
def test_custom_jvp_rule_whose_primal_output_is_shifted_fails_everywhere_jax_uses_it(operator):
    bad = scenario(f"sin/jvp-shifted/{operator}", "jax", planted.jax_sin_jvp(primal_shift=SHIFT), operator)
    for cell in cells(bad, JAX):
        assert cell.status == "fail", (cell.backend, cell.dtype, cell.message)
        assert "differs from f(x)" in cell.message, cell.message
    good = scenario(f"sin/jvp/{operator}", "jax", planted.jax_sin_jvp(), operator)
    assert {c.status for c in cells(good, JAX)} == {"pass"}


@pytest.mark.parametrize("operator", ["jvp", "vjp"])
def test_torch_function_answering_otherwise_when_differentiated_fails_torch_autograd(operator):
    bad = scenario(f"sin/torch-shifted/{operator}", "torch",
                           planted.torch_sin_shifted_when_differentiated(SHIFT), operator)
    got = {c.backend: c for c in cells(bad, ["torch-rev"], ("float64",))}
    cell = got["torch-rev"]
    assert cell.status == "fail", cell.message
    assert f"the primal that torch.autograd.functional.{operator} returned differs from f(x)" in cell.message
    good = scenario(f"sin/torch/{operator}", "torch", planted.torch_sin_shifted_when_differentiated(), operator)
    assert {c.status for c in cells(good, ["torch-rev"])} == {"pass"}
