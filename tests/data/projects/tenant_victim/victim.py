"""Another repository's rule, 50% wrong in its backward: alone, every cell fails."""
import numpy as np
import torch

from gradci import Scenario


class Cube(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x ** 3

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * 1.5 * 3 * x ** 2


def scenarios():
    return [Scenario(f"victim/cube{i}", "gradient", {"torch": lambda x: torch.sum(Cube.apply(x))},
                     np.linspace(0.2, 1.0, 3) + i, dtypes=("float64",)) for i in range(4)]
