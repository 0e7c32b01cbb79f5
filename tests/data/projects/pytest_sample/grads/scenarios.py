"""A sample project for gradci's pytest plugin: one scenario of each outcome."""
import ctypes

import numpy as np
import torch

from gradci import Scenario
from gradci._testing.planted import torch_old_style_power


def scaled_square(scale):
    """x² whose backward and jvp rules are both scaled by ``scale`` (1.0 is correct)."""
    square = torch_old_style_power(2, backward_scale=scale, jvp_scale=scale)
    return lambda x: torch.sum(square(x))


def crash(x):
    ctypes.string_at(0)  # a segfault, as a broken extension's kernel gives
    return torch.sum(x)


X = np.array([0.3, -0.7, 1.2])


def scenarios():
    return [
        Scenario("sample/right", "gradient", {"torch": scaled_square(1.0)}, X),
        Scenario("sample/wrong", "gradient", {"torch": scaled_square(1.5)}, X),
        Scenario("sample/known", "gradient", {"torch": scaled_square(1.5)}, X, xfail={"*": "upstream bug 7"}),
        Scenario("sample/fixed", "gradient", {"torch": scaled_square(1.0)}, X, xfail={"torch-rev": "bug 8, fixed"}),
        Scenario("sample/skipped", "gradient", {"torch": scaled_square(1.0)}, X, skip={"torch-fwd": "not on forward"}),
        Scenario("sample/crash", "gradient", {"torch": crash}, X),
    ]
