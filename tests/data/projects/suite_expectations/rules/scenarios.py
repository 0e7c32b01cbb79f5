"""Rules written the old way (forward(ctx, x)), as entmax, torchdiffeq and gpytorch write them."""
import numpy as np
import torch

from gradci import Scenario


class Square(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        ctx.save_for_forward(x)
        return x ** 2

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return 2 * x * grad

    @staticmethod
    def jvp(ctx, tangent):
        return 2 * ctx.saved_tensors[0] * tangent


def square_sum(x):
    return torch.sum(Square.apply(x) * torch.arange(1, x.shape[0] + 1, dtype=x.dtype))


def scenarios():
    x = np.array([0.3, -0.5, 0.8])
    return [
        Scenario("oldstyle/square", "gradient", {"torch": square_sum}, x),
        Scenario("fixed/square", "gradient", {"torch": square_sum}, x),
    ]
