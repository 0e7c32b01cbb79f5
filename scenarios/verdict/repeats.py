"""Nondeterminism: the same derivative computed several times, bitwise identical or not.

Repeats come from ``Scenario(repeats=N)`` or the ``repeats`` option of a check or a run.

GPU kernels that accumulate with atomics (the backward of scatter, index_add, embedding bags) add in
whatever order threads finish: the last bits change from call to call. That is not a wrong
derivative, so a spread does not fail a cell; the cell records it (``Cell.repeat_spread``) and says so.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import optree

# What a spread is when results differ in bits but in no value (the sign of a zero, a NaN's payload).
BITS_ONLY = float(np.nextafter(0.0, 1.0))


def repeat_spread(first: Any, others: list[Any]) -> float:
    """The largest elementwise difference between ``first`` and each of ``others`` (numpy pytrees).

    0.0 only where all are bitwise identical, infinite where NaN or infinities move.
    """
    spread = 0.0
    reference = optree.tree_leaves(first, none_is_leaf=True)
    for other in others:
        for a, b in zip(reference, optree.tree_leaves(other, none_is_leaf=True)):
            a, b = np.asarray(a), np.asarray(b)
            if a.shape != b.shape:
                return float("inf")
            if a.tobytes() == b.tobytes():
                continue
            with np.errstate(invalid="ignore"):
                difference = np.abs(a - b)
            same = (a == b) | (np.isnan(a) & np.isnan(b))
            difference = np.where(same, 0.0, np.nan_to_num(difference, nan=np.inf))
            spread = max(spread, float(difference.max()) if difference.size else 0.0, BITS_ONLY)
    return spread


def spread_message(spread: float, repeats: int) -> str:
    """What a cell says about its repeats ("" where they were bitwise identical)."""
    if not spread:
        return ""
    return f"not bitwise reproducible: max difference {spread:.3g} over {repeats} repeats"
