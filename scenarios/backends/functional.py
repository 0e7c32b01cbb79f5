"""jax and torch.func share one functional vocabulary (grad, jvp, vjp, jacrev, jacfwd), so one table
of operator definitions per mode serves four backends: jax-rev, jax-rev-jit, jax-fwd, torch-func-rev,
torch-func-fwd.

"reverse" builds every operator from vector-Jacobian products, "forward" from Jacobian-vector
products, so a bug in a custom vjp rule shows in reverse cells and one in a jvp rule in forward cells.
"""
from __future__ import annotations

from typing import Any, Callable


class Transforms:
    """The functional transforms of one framework, under the names jax uses."""

    def __init__(self, grad, value_and_grad, jacrev, jacfwd, jvp, vjp, ravel, ones_like, zeros_like):
        self.grad, self.value_and_grad = grad, value_and_grad
        self.jacrev, self.jacfwd = jacrev, jacfwd
        self.jvp, self.vjp = jvp, vjp
        self.ravel = ravel            # pytree -> (flat vector, unravel)
        self.ones_like, self.zeros_like = ones_like, zeros_like


def _rev_jvp(T: Transforms, f: Callable, x: Any, t: Any) -> Any:
    # J·t as the transpose of the (linear) vjp: differentiate ct -> Jᵀct, a vjp of a vjp.
    y, pullback = T.vjp(f, x)
    return T.vjp(lambda ct: pullback(ct)[0], T.zeros_like(y))[1](t)[0]


def _fwd_vjp(T: Transforms, f: Callable, x: Any, ct: Any) -> Any:
    # Jᵀct from a forward-mode Jacobian of the flattened function: one jvp per input element.
    flat_x, unravel_x = T.ravel(x)
    flat_ct, _ = T.ravel(ct)

    def flat_f(v):
        return T.ravel(f(unravel_x(v)))[0]

    return unravel_x(flat_ct @ T.jacfwd(flat_f)(flat_x))


def _fwd_value_and_grad(T: Transforms, f: Callable, x: Any) -> Any:
    def value_twice(z):  # once differentiated, once carried out as the value: one evaluation
        value = f(z)
        return value, value

    gradient, value = T.jacfwd(value_twice, has_aux=True)(x)
    return value, gradient


def _fwd_derivative(T: Transforms, f: Callable, x: Any) -> Any:
    return T.jvp(f, (x,), (T.ones_like(x),))[1]


REVERSE: dict[str, Callable] = {
    "derivative": lambda T, f, x, t: T.jacrev(f)(x),
    "second_derivative": lambda T, f, x, t: T.jacrev(T.jacrev(f))(x),
    "gradient": lambda T, f, x, t: T.grad(f)(x),
    "value_and_gradient": lambda T, f, x, t: T.value_and_grad(f)(x),
    "jacobian": lambda T, f, x, t: T.jacrev(f)(x),
    "jvp": _rev_jvp,
    "vjp": lambda T, f, x, t: T.vjp(f, x)[1](t)[0],
    "hvp": lambda T, f, x, t: T.vjp(T.grad(f), x)[1](t)[0],   # H is symmetric: Hᵀt = Ht
    "hessian": lambda T, f, x, t: T.jacrev(T.jacrev(f))(x),
}

FORWARD: dict[str, Callable] = {
    "derivative": lambda T, f, x, t: _fwd_derivative(T, f, x),
    "second_derivative": lambda T, f, x, t: _fwd_derivative(T, lambda z: _fwd_derivative(T, f, z), x),
    "gradient": lambda T, f, x, t: T.jacfwd(f)(x),
    "value_and_gradient": lambda T, f, x, t: _fwd_value_and_grad(T, f, x),
    "jacobian": lambda T, f, x, t: T.jacfwd(f)(x),
    "jvp": lambda T, f, x, t: T.jvp(f, (x,), (t,))[1],
    "vjp": _fwd_vjp,
    "hvp": lambda T, f, x, t: T.jvp(T.jacfwd(f), (x,), (t,))[1],
    "hessian": lambda T, f, x, t: T.jacfwd(T.jacfwd(f))(x),
}

TABLES = {"reverse": REVERSE, "forward": FORWARD}
