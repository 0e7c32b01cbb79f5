import numpy as np

from gradci import Scenario
from rulecov.ops import Cube, Square, WrongSquare, jitted_cube_sum


def scenarios():
    x = np.array([0.5, 1.0, 2.0])
    return [
        Scenario("cube/gradient", "gradient", {"torch": lambda v: Cube.apply(v).sum(), "jax": jitted_cube_sum}, x),
        Scenario("square/gradient", "gradient", {"torch": lambda v: Square.apply(v).sum()}, x),
        Scenario("wrong/gradient", "gradient", {"torch": lambda v: WrongSquare.apply(v).sum()}, x),
    ]
