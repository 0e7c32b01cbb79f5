"""Rules with two outputs each, an error in the second one caught only where w is differentiated.

``Mul`` and ``jmul`` compute x * w; their backward returns the gradients for x and for w. The "mul"
scenario holds w constant: the second gradient is computed and thrown away, so an error in it is
caught by none of its cells; "both" makes w depend on x, and there it is compared.
``WrongMul``'s backward is wrong in its first output: its cells fail with or without a plant.
(tests/engine/rules/test_power.py, tests/cli/test_power.py)
"""
import jax
import jax.numpy as jnp
import numpy as np
import torch

W = np.array([1.5, -0.5, 2.0])


class Mul(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w)
        return x * w

    @staticmethod
    def backward(ctx, g):
        x, w = ctx.saved_tensors
        return g * w, g * x


class WrongMul(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w)
        return x * w

    @staticmethod
    def backward(ctx, g):
        x, w = ctx.saved_tensors
        return 2 * g * w, g * x  # wrong: g * w


@jax.custom_vjp
def jmul(x, w):
    return x * w


def jmul_fwd(x, w):
    return x * w, (x, w)


def jmul_bwd(residuals, g):
    x, w = residuals
    return g * w, g * x


jmul.defvjp(jmul_fwd, jmul_bwd)


def torch_mul_sum(v):
    return (Mul.apply(v, torch.as_tensor(W, dtype=v.dtype)) ** 2).sum()


def torch_wrong_sum(v):
    return (WrongMul.apply(v, torch.as_tensor(W, dtype=v.dtype)) ** 2).sum()


def jax_mul_sum(v):
    return jnp.sum(jmul(v, jnp.asarray(W, dtype=v.dtype)) ** 2)


def torch_mul_both(v):
    """w depends on v too: the backward's second output is compared (the twin of ``torch_mul_sum``)."""
    return (Mul.apply(v, torch.as_tensor(W, dtype=v.dtype) * v) ** 2).sum()


def jax_mul_both(v):
    return jnp.sum(jmul(v, jnp.asarray(W, dtype=v.dtype) * v) ** 2)
