"""torch-fwd: forward mode by dual numbers (torch.autograd.forward_ad), the path an
``autograd.Function``'s ``jvp`` staticmethod takes. A planted wrong ``jvp`` fails where torch.func
cannot even run the Function; a dropped tangent (a Function whose forward AD loses the tangent of an
input) fails; an old-style Function without ``jvp`` is an honest error naming the missing rule."""
from __future__ import annotations

import numpy as np
import pytest

import gradci
from gradci import Scenario
from gradci._testing.planted import torch_old_style_power

torch = pytest.importorskip("torch")


def scenario(name, operator, cube, **kwargs):
    """A scenario of ``cube``, x³ as an old-style autograd.Function (``torch_old_style_power``)."""
    def f(x):
        return torch.sum(cube(x) * torch.linspace(0.5, 1.5, x.shape[0], dtype=x.dtype))
    tangent = np.array([0.3, -0.1, 0.2]) if operator == "jvp" else None
    return Scenario(name, operator, {"torch": f}, np.array([0.4, -0.7, 1.1]), tangent=tangent, **kwargs)


def cells(scenarios, backends=("torch-fwd",)):
    report = gradci.check(scenarios, backends=list(backends), devices=["cpu"], dtypes=["float64", "float32"])
    return {(c.scenario, c.backend, c.dtype): c for c in report.cells}


@pytest.mark.parametrize("operator", ["gradient", "jvp", "jacobian"])
def test_a_correct_jvp_rule_passes_and_a_planted_one_fails(operator):
    found = cells([scenario("cube/right", operator, torch_old_style_power(3, jvp_scale=1.0)),
                   scenario("cube/wrong", operator, torch_old_style_power(3, jvp_scale=1.3))])
    for dtype in ("float64", "float32"):
        assert found["cube/right", "torch-fwd", dtype].status == "pass", found["cube/right", "torch-fwd", dtype]
        assert found["cube/wrong", "torch-fwd", dtype].status == "fail", found["cube/wrong", "torch-fwd", dtype]


def test_the_reverse_rule_alone_does_not_decide_torch_fwd():
    """torch-rev reads backward, which is right in both: only torch-fwd sees the planted jvp."""
    found = cells([scenario("cube/wrong", "gradient", torch_old_style_power(3, jvp_scale=1.3))],
                  backends=("torch-rev", "torch-fwd"))
    assert found["cube/wrong", "torch-rev", "float64"].status == "pass"
    assert found["cube/wrong", "torch-fwd", "float64"].status == "fail"


def test_a_function_without_a_jvp_rule_is_an_error_that_says_so():
    cell = cells([scenario("cube/no-jvp", "gradient", torch_old_style_power(3))])["cube/no-jvp", "torch-fwd", "float64"]
    assert cell.status == "error"
    assert "jvp" in cell.message, cell.message


def test_a_dropped_tangent_fails_instead_of_passing_as_zero():
    """A Function whose forward AD forgets a tangent (torchdiffeq's adjoint on its parameters)."""

    class Forgets(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return torch.sin(x)

        @staticmethod
        def backward(ctx, grad):
            raise AssertionError("not used by forward mode")

        @staticmethod
        def jvp(ctx, x_tangent):
            return None  # the tangent is lost

    s = Scenario("forgets", "jvp", {"torch": lambda x: Forgets.apply(x)}, np.array([0.3, 0.9]),
                 tangent=np.array([1.0, 0.5]))
    assert cells([s])["forgets", "torch-fwd", "float64"].status in ("fail", "error")


@pytest.mark.parametrize("operator", ["hvp", "hessian", "second_derivative"])
def test_second_order_is_forward_over_reverse_and_says_so(operator):
    x = np.array(0.7) if operator == "second_derivative" else np.array([0.7, -0.3])
    tangent = np.array([1.0, 0.5]) if operator == "hvp" else None
    s = Scenario(f"smooth/{operator}", operator, {"torch": lambda z: torch.sum(torch.sin(z) * torch.exp(z / 2))}, x,
                 tangent=tangent)
    cell = cells([s])[f"smooth/{operator}", "torch-fwd", "float64"]
    assert cell.status == "pass", cell
    assert "forward over reverse" in cell.warnings


@pytest.mark.parametrize("operator", ["hvp", "hessian"])
def test_torch_rev_second_order_is_grad_of_grad(operator):
    """hvp and hessian on torch-rev differentiate the gradient as users do (create_graph=True):
    a backward that is not differentiable fails them; its correct twin passes."""
    found = {}
    for differentiable in (True, False):
        # x² whose backward is itself differentiable (correct), or cut from the graph
        square = torch_old_style_power(2, differentiable_backward=differentiable)
        s = Scenario(f"square/{differentiable}", operator, {"torch": lambda x, sq=square: torch.sum(sq(x) * x)},
                     np.array([0.4, -0.7]), tangent=np.array([1.0, 0.5]) if operator == "hvp" else None)
        found[differentiable] = cells([s], backends=("torch-rev",))[s.name, "torch-rev", "float64"]
    assert found[True].status == "pass", found[True]
    assert found[False].status == "fail", found[False]
