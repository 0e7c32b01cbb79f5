"""float32 tolerances are relative to the derivative's own size: a 5 % error on derivatives of about
1e-3 fails (the old ``atol · max(1, max|r|)`` let even 30 % through), its correct twin passes, and an
all-zero derivative of an f that is 0 keeps a floor."""
from __future__ import annotations

import numpy as np
import pytest

import gradci
from gradci import Scenario
from gradci._testing.planted import torch_elementwise
from gradci.scenarios.numerics.tolerances import tolerance_for
from gradci.scenarios.reference.answer import ReferenceCache

torch = pytest.importorskip("torch")


def small_loss(rule_scale: float, size: int):
    """1e-3 · Σ w·sin(x): derivatives about 1e-3, its backward and jvp rules scaled by ``rule_scale``."""
    sin = torch_elementwise(torch.sin, torch.cos, backward_scale=rule_scale, jvp_scale=rule_scale)
    weights = 1e-3 * np.cos(np.arange(size) * 0.7 + 0.3)  # not 1e-3 times a 0-d tensor: pytorch#90065
    return Scenario(f"small-{size}-{rule_scale}", "gradient",
                    {"torch": lambda x: torch.sum(sin(x) * torch.as_tensor(weights, dtype=x.dtype))},
                    np.linspace(-1.0, 1.2, size))


@pytest.mark.parametrize("size", [8, 300])  # full reference, probes
@pytest.mark.parametrize("rule_scale, status", [(1.0, "pass"), (1.05, "fail")])
def test_a_five_percent_error_on_a_small_float32_gradient_fails(size, rule_scale, status):
    cells = gradci.check([small_loss(rule_scale, size)], backends=["torch-rev", "torch-func-fwd"], devices=["cpu"],
                         dtypes=["float32"], references=ReferenceCache()).cells
    assert [c.status for c in cells] == [status] * 2, [(c.backend, c.status, c.message) for c in cells]


def test_the_float32_scale_follows_the_derivative_down_to_its_rounding_floor():
    float32 = tolerance_for("float32")
    assert float32.at(f_scale=1e-3, x_scale=1.0, order=1).scale_floor == pytest.approx(1e-3)  # the least
    assert float32.at(f_scale=100.0, x_scale=1.0, order=1).scale_floor > 1.0  # rounding of a large f
    assert tolerance_for("float64").at(f_scale=1e-3, x_scale=1.0, order=1).scale_floor == 1.0  # unchanged


def test_a_zero_gradient_of_a_zero_product_is_decided_in_float32():
    s = Scenario("prod-zeros", "gradient", {"torch": torch.prod}, np.array([0.0, 0.0, 0.7]))
    cells = gradci.check([s], backends=["torch-rev"], devices=["cpu"], dtypes=["float32"],
                         references=ReferenceCache()).cells
    assert [c.status for c in cells] == ["pass"], [c.message for c in cells]
