"""A later module's scenarios: they fail loudly if they see another module's state."""
import random

import jax
import numpy as np
import torch

from gradci import Scenario, namespace

FRESH = {"numpy": np.random.get_state()[1].copy(), "python": random.getstate()}


def leaked():
    """What this module sees of the other module's changes (its import and its scenarios run in turn)."""
    found = []
    if torch.get_default_dtype() != torch.float32:
        found.append("torch default dtype")
    if torch.backends.cuda.matmul.allow_tf32:
        found.append("TF32")
    if torch.get_float32_matmul_precision() != "highest":
        found.append("torch matmul precision")
    if jax.config.values["jax_default_matmul_precision"] is not None:
        found.append("jax matmul precision")
    if np.geterr()["divide"] == "raise":
        found.append("numpy error state")
    return found


AT_IMPORT = leaked()


def checked(x):
    now = leaked()
    if AT_IMPORT or now:
        raise RuntimeError(f"leaked into this module: at import {AT_IMPORT}, while running {now}")
    xp = namespace(x)
    return xp.sum(xp.cos(x))


def turns_tf32_on(x):
    """Changes a switch while its cells run: named on its cells, and undone before the next scenario."""
    torch.backends.cuda.matmul.allow_tf32 = True
    return checked.__wrapped__(x) if hasattr(checked, "__wrapped__") else namespace(x).sum(x ** 2)


def scenarios():
    x = np.array([0.3, 0.4])
    return [Scenario("sees/first", "gradient", checked, x),
            Scenario("sees/switches", "gradient", turns_tf32_on, x),
            Scenario("sees/after", "gradient", checked, x)]
