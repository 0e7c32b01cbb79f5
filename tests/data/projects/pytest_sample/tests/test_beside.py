"""Scenarios beside ordinary tests: no gradci.toml needed for these."""
import numpy as np
import torch

import gradci


def test_an_ordinary_test():
    assert 1 + 1 == 2


@gradci.scenario_tests
def beside_scenarios():
    return [gradci.Scenario("beside/tanh", "gradient", {"torch": lambda x: torch.sum(torch.tanh(x))},
                            np.array([0.1, 0.5]), dtypes=("float64",))]
