import time

from gradci import Scenario
from gradci.scenarios.authoring.namespace import namespace

SLOW_SCENARIOS = 6  # one job each: a run is 6 jobs, about a second apiece, two at a time (tests/e2e/test_faults.py)


def slow(x):
    time.sleep(0.1)  # a job of about a second: long enough to be caught running
    return namespace(x).sum(x ** 3 - 2 * x)


def stuck(x):
    time.sleep(50)  # killed long before the cell timeout: a job whose worker keeps dying
    return namespace(x).sum(x ** 3)


def scenarios():
    return ([Scenario(f"slow/{i}", "derivative", slow, 0.3 + i / 10) for i in range(SLOW_SCENARIOS)]
            + [Scenario("stuck/0", "derivative", stuck, 0.5)])
