"""jax and torch.func share one functional vocabulary (grad, jvp, vjp, jacrev, jacfwd), so each
operator record's ``reverse`` and ``forward`` definitions (``gradci.scenarios.operators``) serve five
backends: jax-rev, jax-rev-jit, jax-fwd, torch-func-rev, torch-func-fwd.
"""
from __future__ import annotations

from typing import Any, Callable

from gradci.scenarios.operators import OPERATOR_RECORDS


class Transforms:
    """The functional transforms of one framework, under the names jax uses."""

    def __init__(self, grad, value_and_grad, jacrev, jacfwd, jvp, vjp, ravel, ones_like, zeros_like, cast_like):
        self.grad, self.value_and_grad = grad, value_and_grad
        self.jacrev, self.jacfwd = jacrev, jacfwd
        self.jvp, self.vjp = jvp, vjp
        self.ravel = ravel            # pytree -> (flat vector, unravel)
        self.ones_like, self.zeros_like = ones_like, zeros_like
        self.cast_like = cast_like    # (tree, like) -> tree with each leaf in like's leaf's dtype


def apply_operator(T: Transforms, mode: str, operator: str, f: Callable, x: Any, tangent: Any) -> Any:
    """``operator`` in ``mode`` ("reverse" or "forward") as its record defines it, through ``T``."""
    record = OPERATOR_RECORDS[operator]
    definition = record.reverse if mode == "reverse" else record.forward
    return definition(T, f, x, tangent)
