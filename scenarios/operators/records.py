"""The derivative operators gradci checks: one ``Operator`` record each, in ``OPERATOR_RECORDS``.

A record says what the operator expects and returns and how every kind of backend computes it, so
that adding an operator is one record plus its functions (and its name in ``gradci.scenarios.contract.cell.OPERATORS``,
the vocabulary the store and the API share). Conventions follow DifferentiationInterface.

Each record's functions are written against a vocabulary its backends hand in
(``gradci.scenarios.operators.vocabulary``), never against a framework or a consumer's internals, so
this module imports no framework:

- ``reverse(T, f, x, t)`` and ``forward(T, f, x, t)``: ``T`` is ``Transforms`` (jax or torch.func).
  ``reverse`` builds the operator from vector-Jacobian products and ``forward`` from Jacobian-vector
  products, so a bug in a custom vjp rule shows in reverse cells and one in a
  jvp rule in forward cells.
- ``autograd(A, f, x, t)``: ``A`` is ``Autograd`` (torch.autograd).
- ``finite_differences(B, t)``: ``B`` is ``FiniteDifferences``; the float64 reference, and the ``fd``
  backend's cross-check with other settings.

``t`` is the tangent (like x) or cotangent (like f(x)) where the operator takes one, else None.

A definition whose transform returns f(x) beside the derivative (``jax.vjp``, ``jax.jvp``, a
Jacobian's ``has_aux``) returns ``WithPrimal(derivative, primal)``, and the record names that
transform in ``primal_from``: the driver checks the primal against f(x) too, as DIT does with every
operator, so that a custom rule returning another value than the function (a ``custom_vjp`` whose
``fwd`` answers otherwise) shows. The primal is the one the transform computed, never f evaluated
again.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import numpy as np
import optree

from gradci.scenarios.contract.cell import OPERATORS
from gradci.scenarios.contract.errors import ScenarioInputError
from gradci.scenarios.numerics.inputs import describe, differentiable
from gradci.scenarios.numerics.reference_values import Reference
from gradci.scenarios.operators.blocks import matrix_blocks
from gradci.scenarios.operators.vocabulary import Autograd, FiniteDifferences, Transforms

__all__ = ["COMPOSITIONS", "Operator", "OPERATOR_RECORDS", "OPERATORS", "WithPrimal", "operator_input"]


class WithPrimal(NamedTuple):
    """A derivative and f(x) as the transform that computed the derivative returned it.

    A NamedTuple, so that it passes out of ``jax.jit`` as a pytree.
    """

    derivative: Any
    primal: Any


@dataclasses.dataclass(frozen=True)
class Operator:
    name: str
    input: str       # "scalar" (0-d array), "array" (one array, not a pytree) or "pytree" (array or pytree)
    output: str      # what f(x) must be: "scalar" or "any" (an array or a pytree)
    result: str      # the result's shape, in words
    reverse: Callable[..., Any]
    forward: Callable[..., Any]
    autograd: Callable[..., Any]
    finite_differences: Callable[..., Reference]
    order: int = 1
    takes_tangent: bool = False         # t is like x
    takes_cotangent: bool = False       # t is like f(x)
    # Forward mode needs one JVP per input element (vectorised, so memory grows with the input).
    per_input_in_forward: bool = False
    returns_value: bool = False         # the result is (f(x), the derivative)
    # The result is a matrix, rows like f(x) (or x), columns like x: for pytrees, jax.jacrev's blocks
    # (a pytree like the rows whose leaves are pytrees like x; block [i][j] of shape row_i.shape + x_j.shape).
    matrix_result: bool = False
    # Which transform returns f(x) beside the derivative, per definition ("reverse", "forward",
    # "autograd"): "{T}" stands for the framework's transforms (jax, torch.func). A definition named
    # here returns ``WithPrimal``; the others return the derivative alone.
    primal_from: Mapping[str, str] = dataclasses.field(default_factory=dict)
    # Second order in the mixed compositions users call (``jax.hessian`` is jacfwd of jacrev, the usual
    # HVP jvp of grad; torch.func's jacrev of jacfwd, vjp of jvp), for the backends that compose so
    # (jax-fwd-rev, torch-func-rev-fwd); None where the operator has no such composition (first order).
    forward_over_reverse: Callable[..., Any] | None = None
    reverse_over_forward: Callable[..., Any] | None = None

    @property
    def takes_tangent_or_cotangent(self) -> bool:
        return self.takes_tangent or self.takes_cotangent

    def composed(self, composition: str) -> Callable[..., Any] | None:
        """The functional definition of ``composition`` (``COMPOSITIONS``), or None where it has none."""
        return {"reverse": self.reverse, "forward": self.forward, "forward-over-reverse": self.forward_over_reverse,
                "reverse-over-forward": self.reverse_over_forward}[composition]


# How a functional backend composes its transforms: first order in one mode; second order the outer
# derivative over the inner one (reverse and forward: over the same mode).
COMPOSITIONS = ("reverse", "forward", "forward-over-reverse", "reverse-over-forward")


# -- functional (jax, torch.func) definitions that are more than one transform ----------------------
def _value_twice(f: Callable) -> Callable:
    """f answering its value twice: once to differentiate, once carried out as the aux (one evaluation)."""
    def value_twice(z):
        value = f(z)
        return value, value

    return value_twice


def _swapped(pair_fn: Callable) -> Callable:
    """A function answering (a, b) made to answer (b, a): the derivative first, for ``has_aux``."""
    def swapped(z):
        a, b = pair_fn(z)
        return b, a

    return swapped


def _rev_jacobian(T: Transforms, f: Callable, x: Any, t: Any) -> WithPrimal:
    return WithPrimal(*T.jacrev(_value_twice(f), has_aux=True)(x))


def _fwd_jacobian(T: Transforms, f: Callable, x: Any, t: Any) -> WithPrimal:
    return WithPrimal(*T.jacfwd(_value_twice(f), has_aux=True)(x))


def _rev_jvp(T: Transforms, f: Callable, x: Any, t: Any) -> WithPrimal:
    # J·t as the transpose of the (linear) vjp: differentiate ct -> Jᵀct, a vjp of a vjp.
    y, pullback = T.vjp(f, x)
    return WithPrimal(T.vjp(lambda ct: pullback(ct)[0], T.zeros_like(y))[1](t)[0], y)


def _fwd_jvp(T: Transforms, f: Callable, x: Any, t: Any) -> WithPrimal:
    y, pushed = T.jvp(f, (x,), (t,))
    return WithPrimal(pushed, y)


def _fwd_vjp(T: Transforms, f: Callable, x: Any, ct: Any) -> WithPrimal:
    # Jᵀct from a forward-mode Jacobian of the flattened function: one jvp per input element.
    flat_x, unravel_x = T.ravel(x)
    flat_ct, _ = T.ravel(ct)

    def flat_f(v):
        y = f(unravel_x(v))
        return T.ravel(y)[0], y

    jacobian, y = T.jacfwd(flat_f, has_aux=True)(flat_x)
    # f may compute in a wider dtype than x (a float64 constant): J is then float64, ct float32.
    return WithPrimal(unravel_x(T.cast_like(flat_ct, jacobian) @ jacobian), y)


def _rev_vjp(T: Transforms, f: Callable, x: Any, ct: Any) -> WithPrimal:
    y, pullback = T.vjp(f, x)
    return WithPrimal(pullback(T.cast_like(ct, y))[0], y)  # the cotangent in f(x)'s dtype, which f may have widened


def _fwd_value_and_grad(T: Transforms, f: Callable, x: Any, t: Any) -> Any:
    gradient, value = T.jacfwd(_value_twice(f), has_aux=True)(x)
    return value, gradient


def _fwd_derivative(T: Transforms, f: Callable, x: Any, t: Any = None) -> WithPrimal:
    y, derivative = T.jvp(f, (x,), (T.ones_like(x),))
    return WithPrimal(derivative, y)


def _fwd_second_derivative(T: Transforms, f: Callable, x: Any, t: Any) -> WithPrimal:
    # The jvp of z -> (f'(z), f(z)): its primal carries f(x) out, its tangent f''(x) (and f'(x)).
    primal, tangent = T.jvp(lambda z: tuple(_fwd_derivative(T, f, z)), (x,), (T.ones_like(x),))
    return WithPrimal(tangent[0], primal[1])


def _rev_twice(T: Transforms, f: Callable, x: Any, t: Any) -> WithPrimal:
    return WithPrimal(*T.jacrev(T.jacrev(_value_twice(f), has_aux=True), has_aux=True)(x))


def _fwd_twice(T: Transforms, f: Callable, x: Any, t: Any) -> WithPrimal:
    return WithPrimal(*T.jacfwd(T.jacfwd(_value_twice(f), has_aux=True), has_aux=True)(x))


def _rev_hvp(T: Transforms, f: Callable, x: Any, t: Any) -> WithPrimal:
    _, pullback, value = T.vjp(_swapped(T.value_and_grad(f)), x, has_aux=True)
    return WithPrimal(pullback(t)[0], value)   # H is symmetric: Hᵀt = Ht


def _fwd_hvp(T: Transforms, f: Callable, x: Any, t: Any) -> WithPrimal:
    (_, value), (pushed, _) = T.jvp(T.jacfwd(_value_twice(f), has_aux=True), (x,), (t,))
    return WithPrimal(pushed, value)


def _fwd_over_rev_second_derivative(T: Transforms, f: Callable, x: Any, t: Any) -> WithPrimal:
    primal, tangent = T.jvp(T.jacrev(_value_twice(f), has_aux=True), (x,), (T.ones_like(x),))
    return WithPrimal(tangent[0], primal[1])


def _fwd_over_rev_hvp(T: Transforms, f: Callable, x: Any, t: Any) -> WithPrimal:
    # jvp of grad, as the usual JAX HVP: the jvp of (value, gradient) carries f(x) out.
    (value, _), (_, pushed) = T.jvp(T.value_and_grad(f), (x,), (t,))
    return WithPrimal(pushed, value)


def _fwd_over_rev_hessian(T: Transforms, f: Callable, x: Any, t: Any) -> WithPrimal:
    # jax.hessian: jacfwd of jacrev.
    return WithPrimal(*T.jacfwd(T.jacrev(_value_twice(f), has_aux=True), has_aux=True)(x))


def _rev_over_fwd_second_derivative(T: Transforms, f: Callable, x: Any, t: Any) -> WithPrimal:
    return WithPrimal(*T.jacrev(lambda z: tuple(_fwd_derivative(T, f, z)), has_aux=True)(x))


def _rev_over_fwd_hvp(T: Transforms, f: Callable, x: Any, t: Any) -> WithPrimal:
    # The vjp of z -> ∇f(z)·t (a jvp): its gradient is H·t.
    directional, pullback, value = T.vjp(lambda z: tuple(_fwd_jvp(T, f, z, t)), x, has_aux=True)
    return WithPrimal(pullback(T.ones_like(directional))[0], value)


def _rev_over_fwd_hessian(T: Transforms, f: Callable, x: Any, t: Any) -> WithPrimal:
    return WithPrimal(*T.jacrev(T.jacfwd(_value_twice(f), has_aux=True), has_aux=True)(x))


# -- torch.autograd -------------------------------------------------------------------------------
def _autograd_second_derivative(A: Autograd, f: Callable, x: Any, t: Any) -> Any:
    return A.jacobian(lambda z: A.jacobian(f, z, create_graph=True), x)


def _autograd_value_and_gradient(A: Autograd, f: Callable, x: Any, t: Any) -> Any:
    value = f(x)
    return value.detach(), A.grad(value, x)


def _with_value(pair: tuple[Any, Any]) -> WithPrimal:
    """(f(x), the derivative), as the ``Autograd`` methods answer, as ``WithPrimal``."""
    value, derivative = pair
    return WithPrimal(derivative, value)


# -- finite-difference references -------------------------------------------------------------------
def _fd_derivative(B: FiniteDifferences, t: Any) -> Reference:
    jac, err = B.jacobian_matrix()
    return B.full(B.like_y(jac[:, 0]), B.like_y(err[:, 0]))


def _fd_second_derivative(B: FiniteDifferences, t: Any) -> Reference:
    # One 1×1 Hessian per output element: f is a function of one number.
    pairs = [B.hessian_matrix(output=i) for i in range(B.output_size)]
    return B.full(B.like_y(np.array([h[0, 0] for h, _ in pairs])),
                  B.like_y(np.array([e[0, 0] for _, e in pairs])))


def _fd_gradient(B: FiniteDifferences, t: Any) -> Reference:
    # Probes compare u·∇f: the weight on the (scalar) output is 1.
    return B.full_or_probes(1, lambda: np.ones(1), matrix=False,
                            full=lambda jac, err: (B.like_x(jac[0]), B.like_x(err[0])))


def _fd_jacobian(B: FiniteDifferences, t: Any) -> Reference:
    def blocks(matrix):
        return matrix_blocks(matrix, B.value, B.x)

    return B.full_or_probes(1, lambda: B.unit_direction(B.output_size), matrix=True,
                            full=lambda jac, err: (blocks(jac), blocks(err)))


def _fd_jvp(B: FiniteDifferences, t: Any) -> Reference:
    d, err = B.directional(B.flat(t))
    return B.full(B.like_y(d), B.like_y(err))


def _fd_vjp(B: FiniteDifferences, ct: Any) -> Reference:
    cotangent = B.flat(ct)
    return B.full_or_probes(1, lambda: cotangent, matrix=False, full=lambda jac, err: (
        B.like_x(cotangent @ jac), B.like_x(np.abs(cotangent) @ err)))


def _fd_hvp(B: FiniteDifferences, t: Any) -> Reference:
    flat_t = B.flat(t)
    return B.full_or_probes(2, lambda: flat_t, matrix=False, full=lambda hess, err: (
        B.like_x(hess @ flat_t), B.like_x(np.abs(err) @ np.abs(flat_t))))


def _fd_hessian(B: FiniteDifferences, t: Any) -> Reference:
    def blocks(matrix):
        return matrix_blocks(matrix, B.x, B.x)

    return B.full_or_probes(2, lambda: B.unit_direction(B.input_size), matrix=True,
                            full=lambda hess, err: (blocks(hess), blocks(err)))


_FROM_JACOBIAN = {"reverse": "{T}.jacrev returned (its aux)", "forward": "{T}.jacfwd returned (its aux)",
                  "autograd": "torch.autograd.functional.jacobian computed"}
_FROM_SECOND_ORDER = {"reverse": "{T}.jacrev of {T}.jacrev returned (its aux)",
                      "forward": "{T}.jacfwd of {T}.jacfwd returned (its aux)",
                      "autograd": "torch.autograd.grad's graph computed"}

_RECORDS = (
    Operator(
        "derivative", input="scalar", output="any", result="like f(x)",
        reverse=_rev_jacobian,
        forward=_fwd_derivative,
        autograd=lambda A, f, x, t: _with_value(A.value_and_jacobian(f, x)),
        finite_differences=_fd_derivative,
        primal_from={**_FROM_JACOBIAN, "forward": "{T}.jvp returned"}),
    Operator(
        "second_derivative", input="scalar", output="any", result="like f(x)", order=2,
        reverse=_rev_twice,
        forward=_fwd_second_derivative,
        autograd=_autograd_second_derivative,
        finite_differences=_fd_second_derivative,
        forward_over_reverse=_fwd_over_rev_second_derivative,
        reverse_over_forward=_rev_over_fwd_second_derivative,
        primal_from={"reverse": _FROM_SECOND_ORDER["reverse"], "forward": "{T}.jvp of {T}.jvp returned",
                     "forward-over-reverse": "{T}.jvp of {T}.jacrev returned",
                     "reverse-over-forward": "{T}.jacrev of {T}.jvp returned (its aux)"}),
    Operator(
        "gradient", input="pytree", output="scalar", result="like x", per_input_in_forward=True,
        reverse=lambda T, f, x, t: T.grad(f)(x),
        forward=lambda T, f, x, t: T.jacfwd(f)(x),
        autograd=lambda A, f, x, t: A.grad(f(x), x),
        finite_differences=_fd_gradient),
    Operator(
        "value_and_gradient", input="pytree", output="scalar", result="(f(x), like x)",
        per_input_in_forward=True, returns_value=True,
        reverse=lambda T, f, x, t: T.value_and_grad(f)(x),
        forward=_fwd_value_and_grad,
        autograd=_autograd_value_and_gradient,
        finite_differences=_fd_gradient),
    Operator(
        "jacobian", input="pytree", output="any", result="f(x).shape + x.shape (per block for pytrees)",
        per_input_in_forward=True, matrix_result=True,
        reverse=_rev_jacobian,
        forward=_fwd_jacobian,
        autograd=lambda A, f, x, t: _with_value(A.value_and_jacobian(f, x)),
        finite_differences=_fd_jacobian,
        primal_from=_FROM_JACOBIAN),
    Operator(
        "jvp", input="pytree", output="any", result="like f(x)", takes_tangent=True,
        reverse=_rev_jvp,
        forward=_fwd_jvp,
        autograd=lambda A, f, x, t: _with_value(A.jvp(f, x, t)),
        finite_differences=_fd_jvp,
        primal_from={"reverse": "{T}.vjp returned", "forward": "{T}.jvp returned",
                     "autograd": "torch.autograd.functional.jvp returned"}),
    Operator(
        "vjp", input="pytree", output="any", result="like x", takes_cotangent=True, per_input_in_forward=True,
        reverse=_rev_vjp,
        forward=_fwd_vjp,
        autograd=lambda A, f, x, t: _with_value(A.vjp(f, x, t)),
        finite_differences=_fd_vjp,
        primal_from={"reverse": "{T}.vjp returned", "forward": "{T}.jacfwd returned (its aux)",
                     "autograd": "torch.autograd.functional.vjp returned"}),
    Operator(
        "hvp", input="pytree", output="scalar", result="like x", order=2, takes_tangent=True,
        per_input_in_forward=True,
        reverse=_rev_hvp,
        forward=_fwd_hvp,
        autograd=lambda A, f, x, t: _with_value(A.hvp(f, x, t)),
        finite_differences=_fd_hvp,
        forward_over_reverse=_fwd_over_rev_hvp,
        reverse_over_forward=_rev_over_fwd_hvp,
        primal_from={"reverse": "{T}.vjp of {T}.value_and_grad returned (its aux)",
                     "forward": "{T}.jvp of {T}.jacfwd returned",
                     "autograd": _FROM_SECOND_ORDER["autograd"],
                     "forward-over-reverse": "{T}.jvp of {T}.value_and_grad returned",
                     "reverse-over-forward": "{T}.vjp of {T}.jvp returned (its aux)"}),
    Operator(
        "hessian", input="pytree", output="scalar", result="x.shape + x.shape (per block for pytrees)", order=2,
        per_input_in_forward=True, matrix_result=True,
        reverse=_rev_twice,
        forward=_fwd_twice,
        autograd=lambda A, f, x, t: _with_value(A.hessian(f, x)),
        finite_differences=_fd_hessian,
        forward_over_reverse=_fwd_over_rev_hessian,
        reverse_over_forward=_rev_over_fwd_hessian,
        primal_from={**_FROM_SECOND_ORDER, "forward-over-reverse": "{T}.jacfwd of {T}.jacrev returned (its aux)",
                     "reverse-over-forward": "{T}.jacrev of {T}.jacfwd returned (its aux)"}),
)

OPERATOR_RECORDS: dict[str, Operator] = {op.name: op for op in _RECORDS}
# The stored vocabulary and the definitions must name the same operators, in the same order.
assert tuple(OPERATOR_RECORDS) == OPERATORS, (tuple(OPERATOR_RECORDS), OPERATORS)


_INPUT_KINDS = {
    "scalar": "a scalar (a float or a 0-d float array)",
    "array": "a float array",
    "pytree": "a float array or a pytree of float arrays",
}


def operator_input(operator: str, x: Any, name: str) -> Any:
    """x as float64 arrays, or a one-line error where the operator is not defined for it.

    The error comes at construction time rather than mid-run.
    """
    kind = OPERATOR_RECORDS[operator].input
    needs = f"{operator} needs x to be {_INPUT_KINDS[kind]}"
    x = differentiable(x, "x", needs, name)
    if kind == "scalar" and not (isinstance(x, np.ndarray) and x.ndim == 0):
        raise ScenarioInputError(f"scenario {name!r}: {needs}; got {_structure(x)}")
    if kind == "array" and not isinstance(x, np.ndarray):
        raise ScenarioInputError(f"scenario {name!r}: {needs}, not a pytree; got {_structure(x)}")
    return x


def _structure(x: Any) -> str:
    if isinstance(x, np.ndarray):
        return describe(x)
    return f"a {type(x).__name__} of {len(optree.tree_leaves(x, none_is_leaf=True))} arrays"
