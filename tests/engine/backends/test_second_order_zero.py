"""A loss linear or piecewise linear in x has a Hessian of exactly 0: every backend returns it and
passes, torch-rev included (its gradient has no graph to differentiate again), while a backward
that cuts a term that does depend on x is still caught."""
from __future__ import annotations

import numpy as np
import pytest

import gradci
from gradci import Scenario
from gradci._testing.planted import torch_old_style_power
from gradci.scenarios.reference.answer import ReferenceCache

torch = pytest.importorskip("torch")
pytest.importorskip("jax")

BACKENDS = ["jax-rev", "jax-rev-jit", "jax-fwd", "torch-rev", "torch-func-rev", "torch-func-fwd", "fd"]


def padded_sum(x):
    """A constant pad, then a weighted sum: linear in x."""
    xp = gradci.namespace(x)
    padded = xp.concat([xp.zeros(2, dtype=x.dtype), x, xp.ones(3, dtype=x.dtype)])
    return xp.sum(padded * xp.arange(padded.shape[0], dtype=x.dtype))


def hinge(x):
    """A margin loss: piecewise linear, away from its kinks here."""
    xp = gradci.namespace(x)
    return xp.sum(xp.maximum(1.0 - 2.0 * x, 0.0)) + 0.5 * xp.sum(x)


# Its 0.5 * (a 0-d sum): torch's forward mode answers float64 there for float32 x, which the derivative
# dtype check fails, rightly, as the known upstream bug.
EXPECTED = {hinge: {("torch-func-fwd", "*", "float32"): "upstream: https://github.com/pytorch/pytorch/issues/90065 "
                                                         "(forward AD promotes a 0-d tensor times a float)"}}


@pytest.mark.parametrize("f", [padded_sum, hinge])
@pytest.mark.parametrize("operator", ["hvp", "hessian"])
@pytest.mark.parametrize("size", [3, 30])
def test_a_linear_or_piecewise_linear_loss_has_a_zero_hvp_that_passes_everywhere(f, operator, size):
    x = np.linspace(-1.0, 1.3, size) + 0.013
    scenario = Scenario(f"{f.__name__}-{size}", operator, f, x, xfail=EXPECTED.get(f, {}))
    cells = gradci.check([scenario], backends=BACKENDS, devices=["cpu"], dtypes=["float64", "float32"],
                         references=ReferenceCache()).cells
    judged = [c for c in cells if c.status not in ("skip", "xfail")]
    assert judged and all(c.status == "pass" for c in judged), [
        (c.backend, c.dtype, c.status, c.message) for c in judged if c.status != "pass"]


@pytest.mark.parametrize("operator", ["hvp", "hessian"])
def test_a_backward_that_detaches_a_term_depending_on_x_is_still_caught(operator):
    cube = torch_old_style_power(3, differentiable_backward=False)
    s = Scenario("detached-cube", operator, {"torch": lambda x: torch.sum(cube(x))}, np.array([0.3, -0.8, 1.1]))
    (found,) = gradci.check([s], backends=["torch-rev"], devices=["cpu"], dtypes=["float64"],
                            references=ReferenceCache()).cells
    assert found.status == "error", found
    assert "cannot be differentiated again" in found.message, found.message
