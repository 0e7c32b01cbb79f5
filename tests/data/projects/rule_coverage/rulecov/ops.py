"""Hand-written derivative rules, as a user's library has them (tests/engine/rules)."""
import jax
import jax.numpy as jnp
import torch


class Cube(torch.autograd.Function):
    generate_vmap_rule = True

    @staticmethod
    def forward(x):
        return x ** 3

    @staticmethod
    def setup_context(ctx, inputs, output):
        (x,) = inputs
        ctx.save_for_backward(x)
        ctx.save_for_forward(x)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return 3 * x ** 2 * g

    @staticmethod
    def jvp(ctx, t):
        (x,) = ctx.saved_tensors
        return 3 * x ** 2 * t


class Square(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return 2 * x * g


class WrongSquare(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return 3 * x * g  # wrong: 2 x


@jax.custom_vjp
def jcube(x):
    return x ** 3


def jcube_fwd(x):
    return x ** 3, x


def jcube_bwd(x, g):
    return (3 * x ** 2 * g,)


jcube.defvjp(jcube_fwd, jcube_bwd)


@jax.jit
def jitted_cube_sum(x):
    return jnp.sum(jcube(x))
