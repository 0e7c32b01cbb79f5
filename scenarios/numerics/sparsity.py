"""Sparsity patterns of Jacobians and Hessians: declared by a scenario, computed from by a backend.

A pattern is a boolean matrix with one row per element of f(x) (of x, for a Hessian) and one column
per element of x, True where the derivative may be nonzero. A scenario declares it as ``sparsity=``
shaped like the result (``f(x).shape + x.shape``, ``x.shape * 2``) or as that matrix; it is kept as
the matrix. Only a single array x takes one: the blocks of a pytree's Jacobian are out of scope.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from gradci.scenarios.contract.errors import ScenarioInputError

SPARSE_OPERATORS = ("jacobian", "hessian")


def declared_pattern(pattern: Any, operator: str, x: Any, name: str) -> np.ndarray | None:
    """A scenario's ``sparsity=`` as a read-only boolean matrix, or a one-line error saying what is wrong."""
    if pattern is None:
        return None
    where = f"scenario {name!r}: sparsity="
    if operator not in SPARSE_OPERATORS:
        raise ScenarioInputError(f"{where} declares a Jacobian's or Hessian's pattern, and this is a {operator} "
                                 f"scenario: leave sparsity out, or make the scenario a jacobian or hessian")
    if not isinstance(x, np.ndarray):
        raise ScenarioInputError(f"{where} is supported for a single array x only, not a pytree of arrays: give x "
                                 f"as one array (concatenate the leaves) or leave sparsity out")
    matrix = _as_booleans(pattern, where)
    columns = max(x.size, 1)
    if operator == "hessian":
        rows, like, shaped_like_result = columns, f"{x.shape * 2}", matrix.shape == x.shape * 2
    else:
        rows, like = matrix.size // columns, f"f(x).shape + {x.shape}"
        shaped_like_result = matrix.ndim >= x.ndim and matrix.shape[matrix.ndim - x.ndim:] == x.shape
    if matrix.size != rows * columns or not (shaped_like_result or matrix.shape == (rows, columns)):
        raise ScenarioInputError(f"{where} has shape {matrix.shape}: it must be shaped like the {operator} "
                                 f"({like}) or be its matrix, ({'n' if operator == 'hessian' else 'm'}, {columns})")
    kept = matrix.reshape(rows, columns).copy()
    kept.flags.writeable = False
    return kept


def _as_booleans(pattern: Any, where: str) -> np.ndarray:
    """A boolean array, or 0s and 1s made one; anything else is refused (a float pattern is a mistake)."""
    array = np.asarray(pattern)
    if array.dtype == np.bool_:
        return array
    if array.dtype.kind in "iu" and np.isin(array, (0, 1)).all():
        return array.astype(bool)
    raise ScenarioInputError(f"{where} must be a boolean numpy array (True where the derivative may be nonzero); "
                             f"got {array.dtype} values")


def as_matrix(result: Any, columns: int) -> np.ndarray:
    """A Jacobian or Hessian as the matrix a pattern describes: one column per element of x."""
    return np.asarray(result, dtype=np.float64).reshape(-1, max(columns, 1))


def first_entry(mask: np.ndarray) -> tuple[int, int] | None:
    """The first (row, column) where ``mask`` holds, row by row, or None."""
    found = np.argwhere(mask)
    return (int(found[0][0]), int(found[0][1])) if found.size else None


def entry_name(entry: tuple[int, int]) -> str:
    return f"(row {entry[0]}, column {entry[1]})"
