import numpy as np

from gradci import Scenario
from solverops.ops import cube_root, solve_linear, solve_linear_jit


def scenarios():
    return [
        Scenario("linear/jacobian", "jacobian", {"jax": solve_linear}, np.array([0.5, -1.0, 2.0])),
        Scenario("linear-jit/jacobian", "jacobian", {"jax": solve_linear_jit}, np.array([0.5, -1.0, 2.0])),
        Scenario("root/jacobian", "jacobian", {"jax": cube_root}, np.array([0.5, 1.0, 2.0])),
    ]
