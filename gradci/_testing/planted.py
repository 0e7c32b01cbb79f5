"""Planted custom derivative rules, and plain scenario functions to check beside them.

The rules are shared by gradci's tests and the scenario projects they check (a checkout's runner
imports the installed gradci, never the repository's ``tests/``). The plain scenario functions are
smooth ones that pass and one that crashes its runner.
"""
from __future__ import annotations

import os
import signal

import numpy as np

from gradci import Scenario
from gradci.scenarios.authoring.namespace import namespace


def torch_elementwise(forward, derivative, backward_scale=1.0, jvp_scale: float = 1.0, jvp_rule: bool = True):
    """An elementwise torch.autograd.Function whose backward and jvp rules are scaled.

    It is written in setup_context style, so torch.func can use it. A scale of 1.0 is correct. Either
    scale may be a callable of x, to plant an error in some elements only.
    """
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


def one_element_wrong(x):
    """A scale for ``torch_elementwise``'s rules that is wrong in one element only.

    It is 1 (correct) but 1.01 in element 7. In float32 an error that small in one element of
    thousands hides below random probes; only the elementwise comparison of forward mode with reverse
    mode finds it.
    """
    import torch

    scale = torch.ones_like(x)
    scale[7] = 1.01
    return scale


def torch_tanh(backward_scale=1.0, jvp_scale=1.0):
    """torch.tanh through ``torch_elementwise``, its rules so scaled."""
    import torch

    return torch_elementwise(torch.tanh, lambda x: 1 - torch.tanh(x) ** 2, backward_scale, jvp_scale)


def torch_old_style_power(power: float, backward_scale: float = 1.0, jvp_scale: float | None = None,
                          differentiable_backward: bool = True):
    """x ** power through an autograd.Function written the old way, with a scaled backward.

    The old way is ``forward(ctx, x)`` (as entmax, torchdiffeq and gpytorch write them; torch.func
    refuses them). Its backward is scaled by ``backward_scale`` (1.0 is correct). It has a jvp rule
    only given a ``jvp_scale``, so scaled. A backward that is not ``differentiable_backward`` is cut
    from the graph: the second derivative is silently lost, as in a backward written with .detach() or
    numpy.
    """
    import torch

    def derivative(x):
        return power * x ** (power - 1)

    class OldStylePower(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            if jvp_scale is not None:
                ctx.save_for_forward(x)
            return x ** power

        @staticmethod
        def backward(ctx, grad):
            (x,) = ctx.saved_tensors
            return grad * backward_scale * derivative(x if differentiable_backward else x.detach())

    if jvp_scale is not None:
        def jvp(ctx, tangent):
            (x,) = ctx.saved_tensors
            return tangent * jvp_scale * derivative(x)

        OldStylePower.jvp = staticmethod(jvp)  # type: ignore[method-assign] # the rule exists only when asked for
    return OldStylePower.apply


def smooth(x):
    """sum(sin(x) · x), in whichever framework x is of."""
    xp = namespace(x)
    return xp.sum(xp.sin(x) * x)


def poly(x):
    xp = namespace(x)
    return xp.sum(x ** 3 - 2 * x)


def trig(x):
    xp = namespace(x)
    return xp.sum(xp.sin(x) * xp.cos(x))


def segfault(x):
    """Kills its runner as a broken extension's kernel does."""
    os.kill(os.getpid(), signal.SIGSEGV)


X = np.array([0.3, -0.7, 1.1, 0.5])


def torch_sin(backward_scale: float = 1.0, jvp_scale: float = 1.0, jvp_rule: bool = True):
    import torch

    return torch_elementwise(torch.sin, torch.cos, backward_scale, jvp_scale, jvp_rule)


def jax_sin_vjp(scale: float = 1.0, primal_shift: float = 0.0):
    """sin through a jax.custom_vjp whose backward is scaled and whose fwd's primal is shifted.

    1.0 and 0.0 are correct. A shifted fwd answers sin(x) when the function is called alone and
    sin(x) + shift wherever jax differentiates it (jax.vjp, jax.grad's value).
    """
    import jax
    import jax.numpy as jnp

    @jax.custom_vjp
    def sin(x):
        return jnp.sin(x)

    sin.defvjp(lambda x: (jnp.sin(x) + primal_shift, x), lambda x, g: (g * jnp.cos(x) * scale,))
    return sin


def jax_sin_bwd_through(helper: str = "plain"):
    """sin through a jax.custom_vjp whose bwd multiplies by cos(x) through ``helper``.

    "plain": jnp arithmetic, differentiable in both modes (correct). "custom_vjp": a custom_vjp helper
    (as a bwd calling a library's custom_vjp solve or clip does), right in reverse mode, so reverse
    over reverse passes, but that jvp cannot go through: forward over reverse (``jax.hessian``, jvp of
    grad) raises where the user calls it.
    """
    import jax
    import jax.numpy as jnp

    @jax.custom_vjp
    def times(g, c):
        return g * c

    times.defvjp(lambda g, c: (g * c, (g, c)), lambda res, h: (h * res[1], h * res[0]))

    def multiply(g, c):
        return times(g, c) if helper == "custom_vjp" else g * c

    @jax.custom_vjp
    def sin(x):
        return jnp.sin(x)

    sin.defvjp(lambda x: (jnp.sin(x), x), lambda x, g: (multiply(g, jnp.cos(x)),))
    return sin


def jax_sin_jvp(scale: float = 1.0, primal_shift: float = 0.0):
    """sin through a jax.custom_jvp whose tangent is scaled and whose primal output is shifted."""
    import jax
    import jax.numpy as jnp

    @jax.custom_jvp
    def sin(x):
        return jnp.sin(x)

    @sin.defjvp
    def _(primals, tangents):
        (x,), (t,) = primals, tangents
        return jnp.sin(x) + primal_shift, t * jnp.cos(x) * scale

    return sin


def torch_sin_shifted_when_differentiated(primal_shift: float = 0.0):
    """sin through an old-style autograd.Function that answers sin(x) + shift when x requires grad.

    0.0 is correct. Called alone (no grad) it answers sin(x); differentiated by torch.autograd it
    answers another value, as a Function whose forward takes another path when a gradient is wanted.
    """
    import torch

    class Sin(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return torch.sin(x) + (primal_shift if ctx.needs_input_grad[0] else 0.0)

        @staticmethod
        def backward(ctx, grad):
            (x,) = ctx.saved_tensors
            return grad * torch.cos(x)

    return Sin.apply


def loss_with(sin_fn):
    """A scalar loss through the given sin: sum(sin(x) * x)."""
    def loss(x):
        return namespace(x).sum(sin_fn(x) * x)
    return loss


def numpy_loss(x):
    return np.sum(np.sin(x) * x)


SCALAR_OUTPUT = ("gradient", "hvp", "hessian", "value_and_gradient")


def scenario(name: str, framework: str, sin_fn, operator: str = "gradient", x=X,
             dtypes: tuple[str, ...] = ("float64",)) -> Scenario:
    """sin_fn as the scenario's function: as it is, or in a scalar loss where the operator needs one."""
    f = loss_with(sin_fn) if operator in SCALAR_OUTPUT else sin_fn
    reference = numpy_loss if operator in SCALAR_OUTPUT else np.sin
    return Scenario(name=name, operator=operator, f={"numpy": reference, framework: f}, x=x, dtypes=dtypes)


def wrong_by(f, eps: float):
    """A torch function with the same value as ``f`` and a gradient off by ``eps`` in every element.

    A planted wrong derivative on code nobody here wrote.
    """
    def planted(x, *contexts):
        return f(x, *contexts) + eps * (x - x.detach()).sum()

    return planted


def jax_branch_frozen_when_traced(frozen: bool = True):
    """sum(x²) where x[0] > 0, else sum(x³), the branch taken in Python from x[0]'s value.

    Eagerly the branch follows x. A traced x (under jit, or jax.grad op by op) has no value (``float``
    of it raises): the planted one
    (``frozen``) then takes the branch of the first concrete x it met, as code that remembers a mode
    from its first call does, so a program traced once keeps that branch for every later input. The
    correct twin (``frozen=False``) traces both branches and selects with ``jnp.where``.
    """
    import jax
    import jax.numpy as jnp

    first: dict[str, bool] = {}

    def f(x):
        if not frozen:
            return jnp.where(x[0] > 0, jnp.sum(x ** 2), jnp.sum(x ** 3))
        try:
            positive = float(x[0]) > 0
            first.setdefault("positive", positive)
        except jax.errors.ConcretizationTypeError:
            positive = first.get("positive", True)
        return jnp.sum(x ** 2) if positive else jnp.sum(x ** 3)

    return f


def torch_sin_with_cached_derivative(cached: bool = True):
    """torch.sin through an autograd.Function whose backward keeps cos(x) from its first call.

    As a rule that caches "the Jacobian" on its class to save recomputing it: right at the point of
    its first backward pass, wrong everywhere else. The correct twin (``cached=False``) computes
    cos(x) from the saved input at every call.
    """
    import torch

    kept: dict[str, torch.Tensor] = {}

    def backward(x, grad):
        if not cached:
            return grad * torch.cos(x)
        if "cos" not in kept:
            kept["cos"] = torch.cos(x).detach()
        return grad * kept["cos"]

    return torch_sin_with_rules(backward=backward, jvp=lambda x, tangent: tangent * torch.cos(x))


# -- rules that break on an empty batch ----------------------------------------------------------
# ``on_empty`` plants what such a rule does where x has no elements: "right" (the correct twin),
# "shape" (returns a gradient of shape (1,) where x has shape (0,), as a rule that allocates its
# result with ``max(n, 1)`` rows does) or "crash" (divides by the batch's largest entry, which an empty
# batch does not have).
def torch_batch_sin(on_empty: str = "right"):
    """sin through an autograd.Function (setup_context style, with a jvp rule) planted as ``on_empty`` says."""
    import torch

    def rule(x, incoming):
        if x.shape[0] == 0 and on_empty == "shape":
            return torch.zeros((1,) + tuple(x.shape[1:]), dtype=x.dtype, device=x.device)
        if on_empty == "crash":
            scale = incoming.abs().amax() / incoming.abs().amax()  # amax of nothing raises
            return incoming * torch.cos(x) * scale
        return incoming * torch.cos(x)

    return torch_sin_with_rules(backward=rule, jvp=rule)


def jax_batch_sin(on_empty: str = "right"):
    """sin through a jax.custom_vjp planted as ``on_empty`` says (see ``torch_batch_sin``)."""
    import jax.numpy as jnp

    def bwd(x, g):
        if x.shape[0] == 0 and on_empty == "shape":
            return (jnp.zeros((1,) + x.shape[1:], dtype=x.dtype),)
        if on_empty == "crash":
            return (g * jnp.cos(x) * (jnp.max(jnp.abs(g)) / jnp.max(jnp.abs(g))),)  # max of nothing raises
        return (g * jnp.cos(x),)

    return jax_sin_with_bwd(bwd)


# -- rules that answer in another dtype than their input's ---------------------------------------
def jax_sin_vjp_answering_in(dtype: str | None = None):
    """sin through a jax.custom_vjp whose backward casts its result to ``dtype`` (None: the input's, correct).

    jax passes a cotangent of another dtype through: a float32 model then gets float64 gradients.
    """
    import jax.numpy as jnp

    def bwd(x, g):
        gradient = g * jnp.cos(x)
        return (gradient.astype(dtype) if dtype else gradient,)

    return jax_sin_with_bwd(bwd)


def torch_sin_jvp_answering_in(dtype: str | None = None):
    """sin through an autograd.Function whose jvp rule casts its tangent to ``dtype`` (None: correct).

    torch casts a backward's gradient back to the input's dtype, but passes a jvp rule's tangent through.
    """
    import torch

    def jvp(x, tangent):
        tangent = tangent * torch.cos(x)
        return tangent.to(getattr(torch, dtype)) if dtype else tangent

    return torch_sin_with_rules(backward=lambda x, grad: grad * torch.cos(x), jvp=jvp)


def torch_sin_with_rules(backward, jvp):
    """sin through a setup_context-style autograd.Function whose rules are ``backward(x, g)``, ``jvp(x, t)``."""
    import torch

    class Sin(torch.autograd.Function):
        generate_vmap_rule = True

        @staticmethod
        def forward(x):
            return torch.sin(x)

        @staticmethod
        def setup_context(ctx, inputs, output):
            ctx.save_for_backward(inputs[0])
            ctx.save_for_forward(inputs[0])

        @staticmethod
        def backward(ctx, grad):
            return backward(ctx.saved_tensors[0], grad)

        @staticmethod
        def jvp(ctx, tangent):
            return jvp(ctx.saved_tensors[0], tangent)

    return Sin.apply


def jax_sin_with_bwd(bwd):
    """sin through a jax.custom_vjp whose backward is ``bwd(x, g)`` (a tuple of one cotangent)."""
    import jax
    import jax.numpy as jnp

    @jax.custom_vjp
    def sin(x):
        return jnp.sin(x)

    sin.defvjp(lambda x: (jnp.sin(x), x), bwd)
    return sin


# -- compiled programs that miss their cache ------------------------------------------------------
def jax_retracing_loss():
    """sum(sin(x) · x) that sets jax's matmul precision from a Python-side counter each time it is traced.

    The precision is part of jit's cache key, so the next call at the same shapes misses the cache and
    traces and compiles again (as a library that flips a jax option inside the model's code does).
    """
    import itertools

    import jax
    import jax.numpy as jnp

    traces = itertools.count()

    def loss(x):
        jax.config.update("jax_default_matmul_precision", ("highest", "float32", "bfloat16")[next(traces) % 3])
        return jnp.sum(jnp.sin(x) * x)

    return loss


def jax_backend_jitting_a_fresh_closure_per_call(fresh: bool = True):
    """A jax-rev-jit-like backend whose compiled call wraps the computation in a new closure each call.

    jit caches by the function object: a fresh one is traced and compiled anew every call (as a
    third-party backend with a non-hashable static argument is). ``fresh=False`` is the correct twin.
    """
    import jax

    from gradci.scenarios.backends.jax_backends import JaxBackend

    class FreshClosures(JaxBackend):
        def compile(self, computation):
            if not fresh:
                return jax.jit(computation)
            return lambda *args: jax.jit(lambda *inner: computation(*inner))(*args)

    return FreshClosures("jax-rev-jit-fresh" if fresh else "jax-rev-jit-kept", "reverse", jit=True)


# -- complex x: rules that must follow their framework's convention (numerics.complex_conventions) ---
Z = np.array([1.0 + 2.0j, -0.5 + 0.3j, 0.7 - 0.4j])


def torch_complex_square(conjugate_in_backward: bool = True):
    """z ↦ z² as a setup_context-style autograd.Function on complex tensors.

    torch's backward of a holomorphic f takes the cotangent times conj(f'(z)) (its convention: the
    gradient of a real L is ∂L/∂Re z + i ∂L/∂Im z); ``conjugate_in_backward=False`` forgets the conjugate,
    the classic bug. The jvp rule is right either way: a tangent is pushed forward by f'(z) itself.
    """
    import torch

    class ComplexSquare(torch.autograd.Function):
        generate_vmap_rule = True

        @staticmethod
        def forward(z):
            return z * z

        @staticmethod
        def setup_context(ctx, inputs, output):
            ctx.save_for_backward(inputs[0])
            ctx.save_for_forward(inputs[0])

        @staticmethod
        def backward(ctx, grad):
            (z,) = ctx.saved_tensors
            return grad * ((2 * z).conj() if conjugate_in_backward else 2 * z)

        @staticmethod
        def jvp(ctx, tangent):
            (z,) = ctx.saved_tensors
            return tangent * 2 * z

    return ComplexSquare.apply


def torch_squared_modulus(convention: str = "torch"):
    """L(z) = Σ|z|² as an autograd.Function whose backward answers in ``convention``.

    torch's is ∂L/∂Re z + i ∂L/∂Im z = 2z; "jax" answers jax's, its conjugate 2·conj(z): a real-valued
    function of complex z whose gradient is reported in the wrong convention for torch.
    """
    import torch

    class SquaredModulus(torch.autograd.Function):
        @staticmethod
        def forward(z):
            return (z.real**2 + z.imag**2).sum()

        @staticmethod
        def setup_context(ctx, inputs, output):
            ctx.save_for_backward(inputs[0])

        @staticmethod
        def backward(ctx, grad):
            (z,) = ctx.saved_tensors
            return grad * 2 * (z if convention == "torch" else z.conj())

    return SquaredModulus.apply


def jax_complex_square_vjp(conjugate_in_bwd: bool = False):
    """z ↦ z² through a jax.custom_vjp.

    jax's bwd of a holomorphic f is ``g · f'(z)``, with no conjugate (its convention is torch's
    conjugated); ``conjugate_in_bwd=True`` writes torch's rule into jax, ``g · conj(f'(z))``.
    """
    import jax
    import jax.numpy as jnp

    @jax.custom_vjp
    def square(z):
        return z * z

    def bwd(z, g):
        derivative = 2 * z
        return (g * (jnp.conj(derivative) if conjugate_in_bwd else derivative),)

    square.defvjp(lambda z: (z * z, z), bwd)
    return square


def jax_complex_square_jvp(conjugate_tangent: bool = False):
    """z ↦ z² through a jax.custom_jvp whose rule pushes the tangent by f'(z), or its conjugate (wrong)."""
    import jax
    import jax.numpy as jnp

    @jax.custom_jvp
    def square(z):
        return z * z

    @square.defjvp
    def rule(primals, tangents):
        (z,), (t,) = primals, tangents
        return z * z, 2 * z * (jnp.conj(t) if conjugate_tangent else t)

    return square
