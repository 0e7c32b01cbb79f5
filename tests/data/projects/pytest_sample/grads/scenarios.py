"""A sample project for gradci's pytest plugin: one scenario of each outcome."""
import ctypes

import numpy as np
import torch

from gradci import Scenario


def scaled_square(scale):
    class Square(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            ctx.save_for_forward(x)
            return x ** 2

        @staticmethod
        def backward(ctx, grad):
            return grad * scale * 2 * ctx.saved_tensors[0]

        @staticmethod
        def jvp(ctx, tangent):
            return tangent * scale * 2 * ctx.saved_tensors[0]

    return lambda x: torch.sum(Square.apply(x))


def crash(x):
    ctypes.string_at(0)  # a segfault, as a broken extension's kernel gives
    return torch.sum(x)


X = np.array([0.3, -0.7, 1.2])


def scenarios():
    return [
        Scenario("sample/right", "gradient", {"torch": scaled_square(1.0)}, X),
        Scenario("sample/wrong", "gradient", {"torch": scaled_square(1.5)}, X),
        Scenario("sample/known", "gradient", {"torch": scaled_square(1.5)}, X, xfail={"*": "upstream bug 7"}),
        Scenario("sample/fixed", "gradient", {"torch": scaled_square(1.0)}, X, xfail={"torch-rev": "bug 8, fixed"}),
        Scenario("sample/skipped", "gradient", {"torch": scaled_square(1.0)}, X, skip={"torch-fwd": "not on forward"}),
        Scenario("sample/crash", "gradient", {"torch": crash}, X),
    ]
