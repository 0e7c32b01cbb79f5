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
                   computed: ComputedPattern | None, failed: bool = False) -> Comparison:
    """The result held against the declared pattern, and the derivative against the backend's own pattern.

    ``failed``: whether the values failed against the reference (only then is a dense derivative
    computed to name the entry a pattern leaves out, where the reference is made of probes).
    """
    if (scenario.sparsity is None and computed is None) or len(refs) != 1:
        return Comparison(ok=True)  # nothing to check: no pattern (a pytree x never has one)
    columns = scenario.x.size
    if np.size(result) % max(columns, 1):
        return Comparison(ok=True)  # a malformed result: the comparison says what is wrong with it
    values = as_matrix(result, columns)
    declared = _outside_declared(values, scenario.sparsity, refs[0], tol, columns)
    return declared.merge(_left_out(computed, refs[0], tol, columns, values, failed)) if computed else declared


def _outside_declared(values: np.ndarray, pattern: np.ndarray | None, ref: Reference, tol: Tolerance,
                      columns: int) -> Comparison:
    if pattern is None or values.shape != pattern.shape:
        return Comparison(ok=True)
    allowed = _allowance(ref, tol, columns, values)
    entry = first_entry(~pattern & (np.abs(values) > allowed))
    if entry is None:
        return Comparison(ok=True)
    return Comparison(ok=False, max_abs_err=float(abs(values[entry])), message=(
        f"nonzero outside the declared sparsity pattern at {entry_name(entry)}: {values[entry]:.6g} (allowed "
        f"{allowed[entry]:.2g}); the derivative leaks into an entry f does not depend on (a custom rule's "
        f"stray term?)"))


def _left_out(computed: ComputedPattern, ref: Reference, tol: Tolerance, columns: int,
              values: np.ndarray, failed: bool) -> Comparison:
    """An entry the derivative has, beyond tolerance, that the backend's pattern leaves out.

    By the full reference; where the reference is made of probes (which cannot name an entry), by the
    framework's dense derivative, asked only for a cell whose values already fail.
    """
    if ref.is_full:
        expected, by = as_matrix(ref.full, columns), "the reference"
    elif failed and computed.dense is not None:
        dense = computed.dense()
        expected, by = as_matrix(dense, columns), "the framework's dense derivative (the reference's probes fail)"
    else:
        return Comparison(ok=True)
    pattern = np.asarray(computed.matrix, dtype=bool)
    if pattern.shape != expected.shape:
        return Comparison(ok=False, message=f"{computed.source} has shape {pattern.shape}; the {expected.shape[0]}x"
                                            f"{expected.shape[1]} matrix needs one entry per element")
    allowed = _allowance(ref, tol, columns, expected)
    entry = first_entry(~pattern & (np.abs(expected) > allowed))
    if entry is None:
        return Comparison(ok=True)
    return Comparison(ok=False, max_abs_err=float(abs(expected[entry] - values[entry])), message=(
        f"{computed.source} leaves out {entry_name(entry)}, where {by} is {expected[entry]:.6g} and the result "
        f"{values[entry]:.6g}: the coloring computes an entry outside its pattern as 0 (or mixes it into "
        f"another), a silently wrong derivative"))


def _allowance(ref: Reference, tol: Tolerance, columns: int, values: np.ndarray) -> np.ndarray:
    """How far from 0 an entry may be and count as 0: atol at the reference's scale, plus the errors there.

    The reference's error estimate, and a backend's own (finite differences); the scale is the result's
    own where the reference is made of probes.
    """
    reference = as_matrix(ref.full, columns) if ref.is_full else values
    error = as_matrix(ref.full_error, columns) if ref.is_full and ref.full_error is not None else 0.0
    if ref.backend_error is not None and np.size(ref.backend_error) == values.size:
        error = error + np.nan_to_num(as_matrix(ref.backend_error, columns), nan=np.inf)
    scale = max(1.0, float(np.max(np.abs(reference), initial=0.0)))
    return tol.atol * scale + REFERENCE_ERROR_FACTOR * np.broadcast_to(error, values.shape)
