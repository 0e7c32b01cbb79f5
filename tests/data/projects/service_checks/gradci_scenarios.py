import os
import signal
import time

import numpy as np

from gradci import Scenario
from gradci.scenarios.authoring.namespace import namespace


def poly(x):
    xp = namespace(x)
    return xp.sum(x ** 3 - 2 * x)


def trig(x):
    xp = namespace(x)
    return xp.sum(xp.sin(x) * xp.cos(x))


def tanh(x):
    xp = namespace(x)
    return xp.sum(xp.tanh(x))


def segfault(x):
    os.kill(os.getpid(), signal.SIGSEGV)


def slow(x):
    time.sleep(0.02)
    return poly(x)


def one_element_wrong(x):
    # 1% in one element of 2000: hidden below float32 probes, found only by comparing forward mode's
    # result with reverse mode's, which run in different jobs of the service.
    import torch

    scale = torch.ones_like(x)
    scale[7] = 1.01
    return scale


def tanh_with_a_wrong_jvp(x):
    import torch

    return torch_elementwise(torch.tanh, lambda z: 1 - torch.tanh(z) ** 2, jvp_scale=one_element_wrong)(x).sum()


def scenarios():
    x = np.array([0.3, -0.2, 0.7])
    made = [
        Scenario("culprit/tanh-jvp", "gradient", {"numpy": lambda x: np.sum(np.tanh(x)),
                                                  "torch": tanh_with_a_wrong_jvp},
                 np.linspace(-1, 1, 2000), dtypes=("float32",)),
        Scenario("ok/poly", "gradient", poly, x),
        Scenario("ok/trig", "gradient", trig, x),
        Scenario("ok/tanh", "gradient", tanh, x, dtypes=("float64",)),
        Scenario("crash/segfault", "gradient", segfault, x),
    ]
    return made + [Scenario(f"slow/{i}", "gradient", slow, x) for i in range(6)]


# A copy of tests/support/planted.py's torch_elementwise: a checkout's runner cannot import tests/.
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
