"""References of large inputs are random probes: u·∇f against the derivative of f along u, from six
points besides f(x), whether f's points are evaluated in one batched call (torch) or one by one (numpy,
each point built in arrays of its own); a wrong gradient fails against them."""
from __future__ import annotations

import numpy as np
import pytest

import gradci
from gradci import Scenario, namespace
from gradci._testing.planted import torch_elementwise
from gradci.scenarios.reference.evaluation_memo import EvaluationMemo
from gradci.scenarios.reference.finite_differences import FULL_FIRST_ORDER_LIMIT, compute_references
from gradci.scenarios.reference.stencils import batched_function

SIZE = 200  # well past FULL_FIRST_ORDER_LIMIT: probed
X = np.linspace(-1.5, 1.5, SIZE)


def smooth(x):
    xp = namespace(x)
    return xp.sum(xp.tanh(x) * xp.exp(x / 3))


def smooth_gradient(x):
    t, e = np.tanh(x), np.exp(x / 3)
    return (1 - t * t) * e + t * e / 3


def smooth_torch(x):
    import torch

    return (torch.tanh(x) * torch.exp(x / 3)).sum()


@pytest.mark.parametrize("f", [smooth, {"torch": smooth_torch}], ids=["numpy, point by point", "torch, batched"])
def test_a_probe_matches_the_exact_directional_derivative(f):
    assert SIZE > FULL_FIRST_ORDER_LIMIT
    scenario = Scenario("smooth/gradient", "gradient", f, X)
    (reference,) = compute_references(scenario, memo=EvaluationMemo())[1]
    (probe,) = reference.probes
    exact = float(probe.u @ smooth_gradient(X))
    assert abs(probe.value - exact) <= 1e-9 * abs(exact)
    assert 0 <= probe.error <= 1e-8 * abs(exact)
    assert np.isclose(np.linalg.norm(probe.u), 1.0)


def test_a_probe_costs_six_points_besides_f_at_x():
    scenario = Scenario("smooth/gradient", "gradient", smooth, X)
    memo = EvaluationMemo()
    compute_references(scenario, memo=memo)
    assert batched_function(scenario) is None  # numpy: every evaluation is counted one by one
    assert memo.flat_function(scenario).evaluations == 6


def tanh_cos(backward_scale: float):
    """sum(tanh(x)·cos(x)) through a hand-written tanh whose backward is scaled (1.0: correct)."""
    import torch

    tanh = torch_elementwise(torch.tanh, lambda x: 1 - torch.tanh(x) ** 2, backward_scale)
    return lambda x: (tanh(x) * x.cos()).sum()


@pytest.mark.parametrize("factor, status", [(1.0, "pass"), (1.001, "fail"), (0.98, "fail")])
def test_a_wrong_backward_of_a_large_input_fails_against_the_probe(factor, status):
    pytest.importorskip("torch")
    scenario = Scenario("tanh-cos/gradient", "gradient", {"torch": tanh_cos(factor)}, X)
    (cell,) = gradci.check([scenario], backends=["torch-rev"], devices=["cpu"], dtypes=["float64"]).cells
    assert cell.reference.endswith("probes"), cell.reference
    assert cell.status == status, cell.message
