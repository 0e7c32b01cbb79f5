"""The user's own test, run by pytest from the repository's root: their packages `services`,
`scenarios`, `web` and `worker` and gradci side by side in one process."""
import sys
from pathlib import Path

import numpy as np

import gradci
import grad_scenarios
import services.pricing

ROOT = Path(__file__).resolve().parent.parent


def test_the_pricing_gradients_are_right():
    report = gradci.check(grad_scenarios.scenarios(), backends=["torch-rev"], devices=["cpu"], dtypes=["float64"])
    assert report.ok, [(cell.scenario, cell.status, cell.message) for cell in report.cells]
    assert {cell.status for cell in report.cells} == {"pass"} and len(report.cells) == 2


def test_our_packages_are_ours_and_gradcis_are_under_gradci():
    x = np.array([1.0, 2.0])
    assert np.allclose(services.pricing.price_derivative(x), [1.3, 1.4])
    for name in ("scenarios", "services", "web", "worker"):
        module = sys.modules[name]
        assert Path(module.__file__).resolve().is_relative_to(ROOT), (name, module.__file__)
    assert not Path(gradci.__file__).resolve().is_relative_to(ROOT)
    assert sys.modules["gradci.scenarios"].__name__ == "gradci.scenarios"  # gradci's engine, by its own name
