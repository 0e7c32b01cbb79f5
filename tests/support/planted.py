"""Planted bugs and their correct twins: custom derivative rules in torch and jax."""
from __future__ import annotations

import numpy as np

from gradci import Scenario, namespace
from gradci.testing.planted import torch_elementwise

X = np.array([0.3, -0.7, 1.1, 0.5])


def torch_sin(backward_scale: float = 1.0, jvp_scale: float = 1.0, jvp_rule: bool = True):
    import torch

    return torch_elementwise(torch.sin, torch.cos, backward_scale, jvp_scale, jvp_rule)


def jax_sin_vjp(scale: float = 1.0):
    import jax
    import jax.numpy as jnp

    @jax.custom_vjp
    def sin(x):
        return jnp.sin(x)

    sin.defvjp(lambda x: (jnp.sin(x), x), lambda x, g: (g * jnp.cos(x) * scale,))
    return sin


def jax_sin_jvp(scale: float = 1.0):
    import jax
    import jax.numpy as jnp

    @jax.custom_jvp
    def sin(x):
        return jnp.sin(x)

    @sin.defjvp
    def _(primals, tangents):
        (x,), (t,) = primals, tangents
        return jnp.sin(x), t * jnp.cos(x) * scale

    return sin


def loss_with(sin_fn):
    """A scalar loss through the given sin: sum(sin(x) * x)."""
    def loss(x):
        return namespace(x).sum(sin_fn(x) * x)
    return loss


def numpy_loss(x):
    return np.sum(np.sin(x) * x)


def scenario(name: str, framework: str, sin_fn, operator: str = "gradient", x=X) -> Scenario:
    f = loss_with(sin_fn) if operator in ("gradient", "hvp", "value_and_gradient") else sin_fn
    reference = numpy_loss if operator in ("gradient", "hvp", "value_and_gradient") else np.sin
    return Scenario(name=name, operator=operator, f={"numpy": reference, framework: f}, x=x,
                    dtypes=("float64",))


def wrong_by(f, eps: float):
    """A torch function with the same value as ``f`` and a gradient off by ``eps`` in every element:
    a planted wrong derivative on code nobody here wrote."""
    def planted(x, *contexts):
        return f(x, *contexts) + eps * (x - x.detach()).sum()

    return planted
