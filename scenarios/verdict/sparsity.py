"""A Jacobian's or Hessian's sparsity: nonzeros outside the declared pattern, entries a backend's pattern left out.

Both name the first offending (row, column) of the matrix (one row per element of f(x), or of x for
a Hessian; one column per element of x). A value counts as nonzero beyond the dtype's absolute
tolerance, at the reference's scale, widened by the reference's error estimate there
(``gradci.scenarios.numerics.tolerances``).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from gradci.scenarios.authoring.scenario import Scenario
from gradci.scenarios.backends.base import ComputedPattern
from gradci.scenarios.numerics.reference_values import Reference
from gradci.scenarios.numerics.sparsity import as_matrix, entry_name, first_entry
from gradci.scenarios.numerics.tolerances import REFERENCE_ERROR_FACTOR, Tolerance
from gradci.scenarios.verdict.against_reference import Comparison


def check_sparsity(result: Any, scenario: Scenario, refs: list[Reference], tol: Tolerance,
                   computed: ComputedPattern | None) -> Comparison:
    """The result held against the declared pattern, and the reference against the backend's own pattern."""
    if scenario.operator not in ("jacobian", "hessian") or len(refs) != 1:
        return Comparison(ok=True)
    columns = scenario.x.size
    if np.size(result) % max(columns, 1):
        return Comparison(ok=True)  # a malformed result: the comparison says what is wrong with it
    values = as_matrix(result, columns)
    declared = _outside_declared(values, scenario.sparsity, refs[0], tol, columns)
    return declared.merge(_left_out(computed, refs[0], tol, columns)) if computed else declared


def _outside_declared(values: np.ndarray, pattern: np.ndarray | None, ref: Reference, tol: Tolerance,
                      columns: int) -> Comparison:
    if pattern is None or values.shape != pattern.shape:
        return Comparison(ok=True)
    allowed = _allowance(ref, tol, columns, values.shape)
    entry = first_entry(~pattern & (np.abs(values) > allowed))
    if entry is None:
        return Comparison(ok=True)
    return Comparison(ok=False, max_abs_err=float(abs(values[entry])), message=(
        f"nonzero outside the declared sparsity pattern at {entry_name(entry)}: {values[entry]:.6g} (allowed "
        f"{allowed[entry]:.2g}); the derivative leaks into an entry f does not depend on (a custom rule's "
        f"stray term?)"))


def _left_out(computed: ComputedPattern, ref: Reference, tol: Tolerance, columns: int) -> Comparison:
    """An entry the reference has, beyond tolerance, that the backend's pattern leaves out (probes cannot tell)."""
    if not ref.is_full:
        return Comparison(ok=True)
    expected = as_matrix(ref.full, columns)
    pattern = np.asarray(computed.matrix, dtype=bool)
    if pattern.shape != expected.shape:
        return Comparison(ok=False, message=f"{computed.source} has shape {pattern.shape}; the {expected.shape[0]}x"
                                            f"{expected.shape[1]} matrix needs one entry per element")
    allowed = _allowance(ref, tol, columns, expected.shape)
    entry = first_entry(~pattern & (np.abs(expected) > allowed))
    if entry is None:
        return Comparison(ok=True)
    return Comparison(ok=False, max_abs_err=float(abs(expected[entry])), message=(
        f"{computed.source} leaves out {entry_name(entry)}, where the reference is {expected[entry]:.6g}: the "
        f"coloring then computes it as 0 (or mixes it into another entry), a silently wrong derivative"))


def _allowance(ref: Reference, tol: Tolerance, columns: int, shape: tuple[int, ...]) -> np.ndarray:
    """How far from 0 an entry may be and count as 0: atol at the reference's scale, plus its error there."""
    reference = as_matrix(ref.full, columns) if ref.is_full else np.zeros(shape)
    error = as_matrix(ref.full_error, columns) if ref.is_full and ref.full_error is not None else np.zeros(shape)
    scale = max(1.0, float(np.max(np.abs(reference), initial=0.0)))
    return tol.atol * scale + REFERENCE_ERROR_FACTOR * error
