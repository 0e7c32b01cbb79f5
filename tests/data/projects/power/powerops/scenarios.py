import numpy as np

from gradci import Scenario
from powerops.ops import jax_mul_both, jax_mul_sum, torch_mul_both, torch_mul_sum, torch_wrong_sum


def scenarios():
    x = np.array([0.5, 1.0, 2.0])
    return [
        Scenario("mul/gradient", "gradient", {"torch": torch_mul_sum, "jax": jax_mul_sum}, x),
        Scenario("both/gradient", "gradient", {"torch": torch_mul_both, "jax": jax_mul_both}, x),
        Scenario("wrong/gradient", "gradient", {"torch": torch_wrong_sum}, x),
    ]
