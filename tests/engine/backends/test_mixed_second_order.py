"""Second order in the mixed compositions users call: jax.hessian and jvp of grad (forward over
reverse, jax-fwd-rev), torch.func's jacrev of jacfwd and vjp of jvp (reverse over forward,
torch-func-rev-fwd). Each has second-order cells only."""
from __future__ import annotations

import numpy as np
import pytest

import gradci
from gradci import Scenario
from gradci._testing import planted

SECOND_ORDER = ["hvp", "hessian"]
JAX = ["jax-rev-jit", "jax-fwd", "jax-fwd-rev"]


def by_backend(scenario, backends, dtypes=("float64", "float32")):
    report = gradci.check([scenario], backends=backends, devices=["cpu"], dtypes=list(dtypes))
    cells: dict[str, list] = {}
    for cell in report.cells:
        cells.setdefault(cell.backend, []).append(cell)
    return cells, report


def sin_scenario(name, sin_fn, operator):
    return planted.scenario(name, "jax", sin_fn, operator, dtypes=("float64", "float32"))


@pytest.mark.parametrize("operator", SECOND_ORDER)
def test_a_bwd_jvp_cannot_go_through_breaks_forward_over_reverse_only(operator):
    bad = sin_scenario(f"sin/bwd-custom-vjp/{operator}", planted.jax_sin_bwd_through("custom_vjp"), operator)
    cells, _ = by_backend(bad, JAX)
    assert {c.status for c in cells["jax-rev-jit"]} == {"pass"}  # reverse over reverse goes through the bwd
    assert {c.status for c in cells["jax-fwd"]} == {"error"}  # a custom_vjp has no forward mode at all
    for cell in cells["jax-fwd-rev"]:
        assert cell.status == "error", (cell.dtype, cell.message)
        assert cell.message.startswith("forward over reverse (jax.hessian"), cell.message
        assert "custom_vjp" in cell.message, cell.message


@pytest.mark.parametrize("operator", SECOND_ORDER)
def test_a_bwd_of_plain_arithmetic_passes_forward_over_reverse(operator):
    good = sin_scenario(f"sin/bwd-plain/{operator}", planted.jax_sin_bwd_through("plain"), operator)
    cells, _ = by_backend(good, JAX)
    assert {c.status for c in cells["jax-rev-jit"] + cells["jax-fwd-rev"]} == {"pass"}


def smooth(operator):
    x = 0.4 if operator == "second_derivative" else np.array([0.3, -0.7, 1.1])

    def f(x):
        xp = gradci.namespace(x)
        if operator == "second_derivative":
            return xp.stack([xp.sin(x) * x, xp.exp(x * 0.5)])
        return xp.sum(xp.sin(x) * x + x ** 3)

    return Scenario(f"smooth/{operator}", operator, f, x)


@pytest.mark.parametrize("operator", ["second_derivative", "hvp", "hessian"])
def test_mixed_compositions_pass_on_a_smooth_function(operator):
    cells, report = by_backend(smooth(operator), ["jax-fwd-rev", "torch-func-rev-fwd"])
    assert report.ok, [(c.backend, c.dtype, c.message) for c in report.failing()]
    assert {c.status for cs in cells.values() for c in cs} == {"pass"}
    assert set(cells) == {"jax-fwd-rev", "torch-func-rev-fwd"}


def test_mixed_compositions_have_no_first_order_cells():
    scenario = Scenario("smooth/gradient", "gradient", lambda x: gradci.namespace(x).sum(x * x), np.array([1.0, 2.0]))
    report = gradci.check([scenario], backends=["jax-fwd-rev", "torch-func-rev-fwd", "jax-fwd"], devices=["cpu"],
                          dtypes=["float64"])
    assert [c.backend for c in report.cells] == ["jax-fwd"]
    assert report.omitted == 2  # counted, not listed as skips


def tanh_loss(name, tanh_fn):
    return Scenario(name, "hvp", {"numpy": lambda x: np.sum(np.tanh(x) * x),
                                  "torch": lambda x: (tanh_fn(x) * x).sum()}, planted.X, dtypes=("float64",))


def test_torch_reverse_over_forward_differentiates_the_jvp_rule_in_reverse():
    # A setup_context Function's jvp rule scaled wrong: reverse over forward, which differentiates
    # that rule, fails; reverse over reverse does not run it.
    bad = tanh_loss("tanh/bad-jvp/hvp", planted.torch_tanh(jvp_scale=1.01))
    cells, _ = by_backend(bad, ["torch-func-rev", "torch-func-rev-fwd"], ("float64",))
    assert [c.status for c in cells["torch-func-rev"]] == ["pass"]
    assert [c.status for c in cells["torch-func-rev-fwd"]] == ["fail"]
    good = tanh_loss("tanh/hvp", planted.torch_tanh())
    cells, _ = by_backend(good, ["torch-func-rev", "torch-func-rev-fwd"], ("float64",))
    assert [c.status for cs in cells.values() for c in cs] == ["pass", "pass"]
