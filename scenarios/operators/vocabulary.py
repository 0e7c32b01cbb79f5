"""The vocabularies the operator records are written against.

With them a record names no framework and no consumer's internals:

- ``Transforms``: the functional transforms of jax or torch.func (the records' ``reverse`` and
  ``forward`` definitions);
- ``Autograd``: what a record calls on torch.autograd (its ``autograd`` definition);
- ``FiniteDifferences``: what a record calls on the finite-difference reference builder (its
  ``finite_differences`` definition), which returns a ``Reference`` (``gradci.scenarios.numerics.reference_values``).

The backends and the reference builder implement these; the records depend on nothing but this
module and the reference's data, so the dependency points one way: consumers → records → vocabulary.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import numpy as np

from gradci.scenarios.numerics.reference_values import Reference


class Transforms:
    """The functional transforms of one framework, under the names jax uses.

    ``name`` is how a message spells them ("jax", "torch.func"): "{T}" in a record's ``primal_from``.
    """

    def __init__(self, name, grad, value_and_grad, jacrev, jacfwd, jvp, vjp, ravel, ones_like, zeros_like, cast_like):
        self.name = name
        self.grad, self.value_and_grad = grad, value_and_grad
        self.jacrev, self.jacfwd = jacrev, jacfwd
        self.jvp, self.vjp = jvp, vjp
        self.ravel = ravel            # pytree -> (flat vector, unravel)
        self.ones_like, self.zeros_like = ones_like, zeros_like
        self.cast_like = cast_like    # (tree, like) -> tree with each leaf in like's leaf's dtype


class Autograd(Protocol):
    """torch.autograd on pytrees, results detached, with x's structure (f(x)'s for a jvp).

    The methods that answer a pair answer (f(x) as torch computed it on the way, the derivative), as
    ``torch.autograd.functional.jvp`` and ``vjp`` do.
    """

    def jacobian(self, f: Callable, x: Any, create_graph: bool = False) -> Any: ...
    def value_and_jacobian(self, f: Callable, x: Any) -> tuple[Any, Any]: ...
    def hessian(self, f: Callable, x: Any) -> tuple[Any, Any]: ...
    def grad(self, value: Any, x: Any) -> Any: ...
    def jvp(self, f: Callable, x: Any, t: Any) -> tuple[Any, Any]: ...
    def vjp(self, f: Callable, x: Any, ct: Any) -> tuple[Any, Any]: ...
    def hvp(self, f: Callable, x: Any, t: Any) -> tuple[Any, Any]: ...


class FiniteDifferences(Protocol):
    """The float64 finite-difference reference of one scenario at one (co)tangent, over f flattened.

    x is a vector of ``input_size`` elements, f(x) one of ``output_size``.
    """

    @property
    def input_size(self) -> int: ...
    @property
    def output_size(self) -> int: ...
    @property
    def x(self) -> Any: ...        # the scenario's x, as given (a pytree)
    @property
    def value(self) -> Any: ...    # f(x), as f returned it (a pytree)

    def full(self, result: Any, error: Any) -> Reference: ...
    def full_or_probes(self, order: int, weights: Callable[[], np.ndarray], matrix: bool,
                       full: Callable[[np.ndarray, np.ndarray], tuple[Any, Any]]) -> Reference: ...
    def jacobian_matrix(self) -> tuple[np.ndarray, np.ndarray]: ...
    def hessian_matrix(self, output: int = 0) -> tuple[np.ndarray, np.ndarray]: ...
    def directional(self, flat_t: np.ndarray) -> tuple[np.ndarray, np.ndarray]: ...
    def like_x(self, flat: np.ndarray) -> Any: ...
    def like_y(self, flat: np.ndarray) -> Any: ...
    def flat(self, tree: Any) -> np.ndarray: ...
    def unit_direction(self, size: int) -> np.ndarray: ...
