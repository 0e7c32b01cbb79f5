"""Planted bugs and their correct twins: custom derivative rules in torch and jax."""
from __future__ import annotations

import numpy as np

from gradci import Scenario, namespace

X = np.array([0.3, -0.7, 1.1, 0.5])


def torch_elementwise(forward, derivative, backward_scale=1.0, jvp_scale: float = 1.0, jvp_rule: bool = True):
    """An elementwise torch.autograd.Function (setup_context style, so torch.func can use it) whose
    backward and jvp rules are scaled: 1.0 is correct. Either scale may be a callable of x, to plant an
    error in some elements only."""
    import torch

    class Elementwise(torch.autograd.Function):
        generate_vmap_rule = True

        @staticmethod
        def forward(x):
            return forward(x)

        @staticmethod
        def setup_context(ctx, inputs, output):
            ctx.save_for_backward(inputs[0])
            ctx.save_for_forward(inputs[0])

        @staticmethod
        def backward(ctx, grad):
            (x,) = ctx.saved_tensors
            scale = backward_scale(x) if callable(backward_scale) else backward_scale
            return grad * derivative(x) * scale

    if jvp_rule:
        def jvp(ctx, tangent):
            (x,) = ctx.saved_tensors
            scale = jvp_scale(x) if callable(jvp_scale) else jvp_scale
            return tangent * derivative(x) * scale

        Elementwise.jvp = staticmethod(jvp)
    return Elementwise.apply


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
