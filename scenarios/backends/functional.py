"""Operators through the functional transforms that jax and torch.func share.

jax and torch.func share one functional vocabulary (grad, jvp, vjp, jacrev, jacfwd), so each
operator record's ``reverse`` and ``forward`` definitions (``gradci.scenarios.operators.records``) serve five
backends: jax-rev, jax-rev-jit, jax-fwd, torch-func-rev, torch-func-fwd; its mixed second-order
compositions serve jax-fwd-rev (forward over reverse) and torch-func-rev-fwd (reverse over forward).
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gradci.scenarios.backends.base import CellSkipped
from gradci.scenarios.operators.records import OPERATOR_RECORDS
from gradci.scenarios.operators.vocabulary import Transforms


def apply_operator(T: Transforms, composition: str, operator: str, f: Callable, x: Any, tangent: Any) -> Any:
    """``operator`` composed as ``composition`` says (``COMPOSITIONS``), as its record defines it, through ``T``."""
    definition = OPERATOR_RECORDS[operator].composed(composition)
    if definition is None:
        raise CellSkipped(f"{operator} has no {composition} composition")
    return definition(T, f, x, tangent)


def composes(composition: str, operator: str) -> bool:
    """Whether ``operator``'s record defines ``composition``: a backend composing so has cells of it."""
    return OPERATOR_RECORDS[operator].composed(composition) is not None
