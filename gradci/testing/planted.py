"""Planted custom derivative rules shared by gradci's tests and the scenario projects they check
(a checkout's runner imports the installed gradci, never the repository's ``tests/``)."""
from __future__ import annotations


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

        Elementwise.jvp = staticmethod(jvp)  # type: ignore[method-assign] # the rule exists only when asked for
    return Elementwise.apply
