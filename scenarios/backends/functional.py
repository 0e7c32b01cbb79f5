"""Operators through the functional transforms that jax and torch.func share.

jax and torch.func share one functional vocabulary (grad, jvp, vjp, jacrev, jacfwd), so each
operator record's ``reverse`` and ``forward`` definitions (``gradci.scenarios.operators.records``) serve five
backends: jax-rev, jax-rev-jit, jax-fwd, torch-func-rev, torch-func-fwd.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gradci.scenarios.operators.records import OPERATOR_RECORDS
from gradci.scenarios.operators.vocabulary import Transforms


def apply_operator(T: Transforms, mode: str, operator: str, f: Callable, x: Any, tangent: Any) -> Any:
    """``operator`` in ``mode`` ("reverse" or "forward") as its record defines it, through ``T``."""
    record = OPERATOR_RECORDS[operator]
    definition = record.reverse if mode == "reverse" else record.forward
    return definition(T, f, x, tangent)
