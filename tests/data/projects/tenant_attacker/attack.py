"""A pull request's scenario module that, at import, replaces the engine's comparison with one that
always agrees: whatever runs in this process afterwards passes."""
import numpy as np

import gradci.scenarios.check as check
from gradci import Scenario, namespace
from gradci.scenarios.verdict.against_reference import Comparison

check.judge = lambda *args, **kwargs: Comparison(ok=True)  # the driver asks it for every verdict


def scenarios():
    return [Scenario("attacker/sin", "gradient", lambda x: namespace(x).sum(namespace(x).sin(x)),
                     np.array([0.1, 0.2]), dtypes=("float64",))]
