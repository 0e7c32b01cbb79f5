import time

import numpy as np

from gradci import Scenario
from gradci._testing.planted import poly, segfault, trig


def slow(x):
    if type(x).__module__.startswith("torch"):
        time.sleep(1.0)
    return poly(x)


def scenarios():
    x = np.array([0.3, -0.2, 0.7])
    made = [Scenario("ok/poly", "gradient", poly, x), Scenario("ok/trig", "gradient", trig, x),
            Scenario("crash/segfault", "gradient", segfault, x)]
    return made + [Scenario(f"slow/{i}", "gradient", slow, x) for i in range(5)]
