import os
import signal
import time

import numpy as np

from gradci import Scenario
from gradci.scenarios.authoring.namespace import namespace


def poly(x):
    xp = namespace(x)
    return xp.sum(x ** 3 - 2 * x)


def trig(x):
    xp = namespace(x)
    return xp.sum(xp.sin(x) * xp.cos(x))


def segfault(x):
    os.kill(os.getpid(), signal.SIGSEGV)


def slow(x):
    if type(x).__module__.startswith("torch"):
        time.sleep(1.0)
    return poly(x)


def scenarios():
    x = np.array([0.3, -0.2, 0.7])
    made = [Scenario("ok/poly", "gradient", poly, x), Scenario("ok/trig", "gradient", trig, x),
            Scenario("crash/segfault", "gradient", segfault, x)]
    return made + [Scenario(f"slow/{i}", "gradient", slow, x) for i in range(5)]
