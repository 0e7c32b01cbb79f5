import time

import numpy as np

from gradci import Scenario
from gradci.scenarios.authoring.namespace import namespace


def slow(x):
    time.sleep(0.03)  # finite differences call it a few dozen times: about a second a cell
    xp = namespace(x)
    return xp.sum(x ** 2)


def scenarios():
    return [Scenario(f"slow/{i}", "gradient", slow, np.array([0.1 * i, 0.2]), dtypes=("float64",)) for i in range(6)]
