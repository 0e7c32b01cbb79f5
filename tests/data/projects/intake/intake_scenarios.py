import numpy as np

from gradci import Scenario, namespace


def poly(x):
    return namespace(x).sum(x ** 3 - 2 * x)


def scenarios():
    return [Scenario("a/poly", "gradient", poly, np.array([0.3, -0.2]))]  # one cheap cell: a run takes seconds
