"""A derivative must come back in its input's dtype (or in one f itself returns); planted twins."""
from __future__ import annotations

import numpy as np
import pytest

import gradci
from gradci import Scenario
from gradci._testing import planted

JAX_REVERSE = ["jax-rev", "jax-rev-jit"]
TORCH_FORWARD = ["torch-func-fwd", "torch-fwd"]


def _check(framework: str, rule, operator: str, backends: list[str], dtype: str = "float32"):
    # sum(sin(x)), not sum(sin(x) * x): jax refuses to add the product rule's float32 and float64 parts
    f = (lambda x: gradci.namespace(x).sum(rule(x))) if operator == "gradient" else rule
    reference = (lambda x: np.sum(np.sin(x))) if operator == "gradient" else np.sin
    scenario = Scenario(f"dtype/{framework}/{operator}", operator, {framework: f, "numpy": reference}, planted.X,
                        dtypes=(dtype,))
    return gradci.check([scenario], backends=backends, devices=["cpu"])


# jacobian: jax.jacrev casts the rows back to x's dtype itself
@pytest.mark.parametrize("operator", ["gradient", "vjp"])
def test_a_custom_vjp_answering_float64_for_float32_fails_naming_both(operator):
    report = _check("jax", planted.jax_sin_vjp_answering_in("float64"), operator, JAX_REVERSE)
    for cell in report.cells:
        assert cell.status == "fail", (cell.backend, cell.message)
        assert "float64 for float32 inputs" in cell.message, cell.message


@pytest.mark.parametrize("operator", ["gradient", "vjp", "jacobian"])
def test_a_correct_custom_vjp_passes_in_float32(operator):
    report = _check("jax", planted.jax_sin_vjp_answering_in(None), operator, JAX_REVERSE)
    assert {c.status for c in report.cells} == {"pass"}, [c.message for c in report.cells]


def test_a_bfloat16_gradient_silently_upcast_fails():
    report = _check("jax", planted.jax_sin_vjp_answering_in("float32"), "gradient", JAX_REVERSE, dtype="bfloat16")
    for cell in report.cells:
        assert cell.status == "fail" and "float32 for bfloat16 inputs" in cell.message, cell.message
    twin = _check("jax", planted.jax_sin_vjp_answering_in(None), "gradient", JAX_REVERSE, dtype="bfloat16")
    assert {c.status for c in twin.cells} == {"pass"}, [c.message for c in twin.cells]


@pytest.mark.parametrize("operator", ["jvp", "gradient"])
def test_a_jvp_rule_answering_float64_fails_forward_mode_and_its_twin_passes(operator):
    # torch casts a backward's result back to the input's dtype, a jvp rule's it passes through
    report = _check("torch", planted.torch_sin_jvp_answering_in("float64"), operator, TORCH_FORWARD)
    for cell in report.cells:
        assert cell.status == "fail" and "float64 for float32 inputs" in cell.message, (cell.backend, cell.message)
    twin = _check("torch", planted.torch_sin_jvp_answering_in(None), operator, TORCH_FORWARD)
    assert {c.status for c in twin.cells} == {"pass"}, [c.message for c in twin.cells]


def test_f_answering_in_float64_may_have_float64_derivatives():
    """f widened by a float64 constant: forward mode's Jacobian is f's dtype, and that is no bug."""
    def widened(x):
        import jax.numpy as jnp

        return jnp.sin(x) * jnp.asarray(2.0, dtype=jnp.float64)

    scenario = Scenario("dtype/widened", "jacobian", {"jax": widened, "numpy": lambda x: np.sin(x) * 2.0}, planted.X,
                        dtypes=("float32",))
    report = gradci.check([scenario], backends=["jax-fwd", "jax-rev-jit"], devices=["cpu"])
    assert {c.status for c in report.cells} == {"pass"}, [c.message for c in report.cells]
    assert all("f returns float64" in c.message for c in report.cells)


def test_torch_func_forward_mode_upcasting_a_0d_float32_input_is_found():
    """A framework bug, not a planted one: pytorch#90065 (open), found by this check.

    torch.func.jvp of x * 0.5 for a 0-d float32 x answers float64; dual numbers (torch-fwd) do not.
    """
    scenario = Scenario("dtype/torch-func-0d", "derivative", lambda x: gradci.namespace(x).exp(x * 0.5), 0.4,
                        dtypes=("float32",))
    report = gradci.check([scenario], backends=["torch-func-fwd", "torch-fwd", "torch-rev"], devices=["cpu"])
    got = {c.backend: (c.status, c.message) for c in report.cells}
    assert got["torch-func-fwd"][0] == "fail" and "float64 for float32 inputs" in got["torch-func-fwd"][1]
    assert got["torch-fwd"][0] == "pass" and got["torch-rev"][0] == "pass", got


def test_a_complex_cell_names_its_derivatives_dtypes_as_complex():
    from gradci.scenarios.verdict.dtypes import derivative_dtype_message

    message = derivative_dtype_message({"float32", "float64"}, "float32", lambda: {"float32"}, complex_x=True)
    assert "comes back in complex128 for complex64 inputs (f returns complex64)" in message
    assert "float64" not in message.split("(in torch")[0]
