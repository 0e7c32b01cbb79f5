import numpy as np

from affproj import jrules, loaders, rules
from gradci import Scenario

X = np.array([0.5, 1.0, 2.0])


def scenarios():
    def weighted_torch(v):
        import torch
        return (torch.as_tensor(loaders.weights()) * v * v).sum()

    def weighted_jax(v):
        import jax.numpy as jnp
        return jnp.sum(jnp.asarray(loaders.weights()) * v * v)

    return [
        Scenario("scaled/gradient", "gradient", {"torch": lambda v: rules.Scaled.apply(v).sum()}, X),
        Scenario("plain/gradient", "gradient", lambda v: (v * v).sum(), X),
        Scenario("weighted/gradient", "gradient", {"torch": weighted_torch, "jax": weighted_jax}, X),
        Scenario("jitted/gradient", "gradient", {"jax": lambda v: jrules.jitted_cube_sum(v)}, X),
    ]
