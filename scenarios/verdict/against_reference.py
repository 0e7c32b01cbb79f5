"""Comparing a backend's result with the reference: structure, non-finite values, tolerances."""
from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np
import optree

from gradci.scenarios.contract.cell import Status
from gradci.scenarios.numerics.reference_values import Probe, Reference
from gradci.scenarios.numerics.tolerances import (
    REFERENCE_ERROR_FACTOR,
    Tolerance,
    allowance,
    at_point,
    reliable_scale,
    undecided,
)
from gradci.scenarios.operators.blocks import block_matrix
from gradci.scenarios.operators.records import OPERATOR_RECORDS

ANALYTIC_ADVICE = "give an analytic reference"


@dataclasses.dataclass
class Comparison:
    ok: bool
    max_abs_err: float = 0.0
    max_rel_err: float = 0.0
    atol: float = 0.0          # the absolute tolerance in force (atol × the result's scale)
    message: str = ""
    # Why the reference could not decide (its error estimate too large at this tolerance): with ok,
    # no verdict; a result beyond even the widened threshold still fails.
    unreliable: str = ""

    def merge(self, other: Comparison) -> Comparison:
        return Comparison(
            ok=self.ok and other.ok,
            max_abs_err=max(self.max_abs_err, other.max_abs_err),
            max_rel_err=max(self.max_rel_err, other.max_rel_err),
            atol=max(self.atol, other.atol),
            message="; ".join(m for m in (self.message, other.message) if m),
            unreliable=self.unreliable or other.unreliable,
        )

    @property
    def status(self) -> Status:
        if not self.ok:
            return Status.FAIL
        return Status.ERROR if self.unreliable else Status.PASS


def _leaves(tree: Any) -> tuple[list[np.ndarray], Any]:
    leaves, spec = optree.tree_flatten(tree, none_is_leaf=True)
    return [np.asarray(leaf, dtype=np.float64) for leaf in leaves], spec


def _flat(tree: Any) -> np.ndarray:
    """Every leaf of a pytree, float64, in one vector."""
    return np.concatenate([leaf.reshape(-1) for leaf in _leaves(tree)[0]] or [np.zeros(0)])


def element_name(tree: Any, flat_index: int) -> str:
    """The element at ``flat_index`` of a pytree's flattened leaves, as a user finds it.

    Its block (dict key, tuple or list position) and its index within that leaf.
    """
    paths, leaves, _ = optree.tree_flatten_with_path(tree, none_is_leaf=True)
    start = 0
    for path, leaf in zip(paths, leaves):
        size = int(np.size(leaf))
        if flat_index < start + size:
            shape = np.shape(leaf)
            index = np.unravel_index(flat_index - start, shape) if shape else ()
            where = "".join(f"[{key!r}]" for key in path)
            inner = ", ".join(str(int(i)) for i in index)
            element = f"element ({inner})" if len(index) > 1 else f"element {inner}" if index else "the value"
            return f"{element} of block {where}" if where else element
        start += size
    return f"element {flat_index}"


def structure_mismatch(result: Any, expected: Any) -> str | None:
    got, got_spec = _leaves(result)
    want, want_spec = _leaves(expected)
    if got_spec != want_spec:
        return f"structure {got_spec} differs from the reference's {want_spec}"
    for i, (a, r) in enumerate(zip(got, want)):
        if a.shape != r.shape:
            return f"shape {a.shape} differs from the reference's {r.shape} (leaf {i})"
    return None


def compare_arrays(result: Any, expected: Any, error: Any, tol: Tolerance, backend_error: Any = None) -> Comparison:
    """Compare a result with the reference elementwise, within tolerance and the reference's error.

    Elementwise |a - r| <= atol·scale + rtol·|r| + k·err, non-finite values where the reference
    has the same ones and nowhere else; no verdict where the reference's error is too large to
    decide (``unreliable``), unless the result is wrong even so. ``backend_error``, a backend's own
    error estimate (fd), only widens.
    """
    mismatch = structure_mismatch(result, expected)
    if mismatch:
        return Comparison(ok=False, max_abs_err=float("inf"), max_rel_err=float("inf"), message=mismatch)
    a, r = _flat(result), _flat(expected)
    e = np.nan_to_num(_flat(error), nan=np.inf, posinf=np.inf)
    finite_r, finite_a = np.isfinite(r), np.isfinite(a)
    scale = reliable_scale(r[finite_r], e[finite_r], tol)
    with np.errstate(invalid="ignore"):
        allowed = allowance(tol, np.abs(r), scale)
        unsure = finite_r & undecided(e, tol, np.abs(r), scale)
    unreliable = _unreliable(unsure, e, allowed, lambda i: element_name(expected, i))
    same_nonfinite = (~finite_r & ~finite_a) & ((np.isnan(r) & np.isnan(a)) | (a == r))
    bad_nonfinite = ((~finite_a & ~same_nonfinite) | (~finite_r & finite_a)) & ~unsure
    if np.any(bad_nonfinite):
        where = int(np.argmax(bad_nonfinite))
        return Comparison(ok=False, max_abs_err=float("inf"), max_rel_err=float("inf"),
                          message=f"non-finite mismatch: got {a[where]} where the reference has {r[where]} "
                                  f"({element_name(expected, where)})")
    both = finite_r & finite_a
    atol = tol.atol * scale
    diff = np.where(both, np.abs(a - r), 0.0)
    widening = e if backend_error is None else e + np.abs(np.nan_to_num(_flat(backend_error), nan=np.inf))
    threshold = np.where(both, allowed + REFERENCE_ERROR_FACTOR * widening, np.inf)
    ok = bool(np.all(diff <= threshold))
    max_abs = float(np.max(diff)) if diff.size else 0.0
    max_rel = float(np.max(diff / (np.abs(np.where(both, r, 0.0)) + atol))) if diff.size else 0.0
    message = "" if ok else _worst(diff, threshold, a, r, lambda i: element_name(expected, i))
    return Comparison(ok=ok, max_abs_err=max_abs, max_rel_err=max_rel, atol=atol, message=message,
                      unreliable=unreliable)


def _unreliable(unsure: np.ndarray, error: np.ndarray, allowed: np.ndarray, name: Callable[[int], str]) -> str:
    """The message for the worst element the reference's error estimate leaves undecided, or ""."""
    if not np.any(unsure):
        return ""
    worst = int(np.argmax(np.where(unsure, error / allowed, -np.inf)))
    return (f"reference unreliable: estimated error {error[worst]:.2g} at {name(worst)} (tolerance "
            f"{allowed[worst]:.2g}); {ANALYTIC_ADVICE}")


def _worst(diff, threshold, a, r, name: Callable[[int], str]) -> str:
    worst = int(np.argmax(diff / threshold))
    return (f"{int(np.sum(diff > threshold))} of {diff.size} elements beyond tolerance; worst: "
            f"got {a[worst]:.10g}, reference {r[worst]:.10g} ({name(worst)})")


def probe_projection(flat: np.ndarray, probe: Probe) -> tuple[float, float]:
    """The flattened result R projected on a probe, and the rounding-noise scale of that projection.

    As a pair: u·R (or w·R·u for matrix results), and the norm of the terms.
    """
    if probe.w is None:
        terms = flat * probe.u
    else:
        terms = probe.w[:, None] * flat.reshape(probe.w.size, probe.u.size) * probe.u[None, :]
    # Not np.linalg.norm: a threaded BLAS call whose spinning workers fought torch's threads for the
    # cores (1.7 ms a probed cell on one torch thread, 20-30 ms on two, and a slower next call); einsum's
    # own loop, without BLAS, sums the squares without another temporary the size of the result.
    return float(np.sum(terms)), float(np.sqrt(np.einsum("i,i->", terms.reshape(-1), terms.reshape(-1))))


def compare_probes(flat: np.ndarray, probes: list[Probe], tol: Tolerance, expected_size: int) -> Comparison:
    """``flat``: the result laid out as the probes read it (``probed_layout``)."""
    total = Comparison(ok=True)
    if flat.size != expected_size:
        return Comparison(ok=False, max_abs_err=float("inf"), max_rel_err=float("inf"),
                          message=f"result has {flat.size} elements, expected {expected_size}")
    for probe in probes:
        projection, noise_scale = probe_projection(flat, probe)
        if not np.isfinite(projection):
            return Comparison(ok=False, max_abs_err=float("inf"), max_rel_err=float("inf"),
                              message=_non_finite_message(flat, projection, probe))
        value, error = np.array([probe.value]), np.array([probe.error])
        magnitude = np.array([max(noise_scale, abs(probe.value))])
        # Relative to the result's own size (float32's scale may be below 1): the projection's terms as
        # well as their sum, which may cancel.
        scale = max(reliable_scale(value, error, tol), float(magnitude[0]) if tol.eps is not None else 0.0)
        atol = tol.atol * scale
        diff = abs(projection - probe.value)
        allowed = allowance(tol, magnitude, scale)
        ok = bool(diff <= allowed[0] + REFERENCE_ERROR_FACTOR * probe.error)
        total = total.merge(Comparison(
            ok=ok, max_abs_err=diff, max_rel_err=diff / (abs(probe.value) + atol), atol=atol,
            message="" if ok else f"probe: got {projection:.10g}, reference {probe.value:.10g}",
            unreliable=_unreliable(undecided(error, tol, magnitude, scale), error, allowed, lambda i: f"probe {i}")))
    return total


def compare_to_reference(result: Any, reference: Reference, tol: Tolerance, operator: str,
                         custom: Callable | None = None, *, x: Any) -> Comparison:
    """The whole comparison of one (co)tangent's result.

    An operator that returns the value (value_and_gradient) has it checked too. ``x``, the scenario's
    point, lays out a matrix result's blocks for probes. The tolerance takes its floors at f(x) and x
    (``Tolerance.at``).
    """
    tol = at_point(tol, reference.value, x, OPERATOR_RECORDS[operator].order)
    if OPERATOR_RECORDS[operator].returns_value:
        if not (isinstance(result, (tuple, list)) and len(result) == 2):
            return Comparison(ok=False, message=f"{operator} must return (value, gradient)")
        value_cmp = compare_arrays(result[0], reference.value, optree.tree_map(np.zeros_like, reference.value), tol)
        if value_cmp.message:
            value_cmp.message = "value: " + value_cmp.message
        return value_cmp.merge(_compare_derivative(result[1], reference, tol, custom, operator, x))
    return _compare_derivative(result, reference, tol, custom, operator, x)


def _compare_derivative(result: Any, reference: Reference, tol: Tolerance, custom: Callable | None,
                        operator: str, x: Any) -> Comparison:
    if custom is not None and reference.is_full:
        ok, max_abs, max_rel = custom(result, reference.full, tol.rtol, tol.atol)
        return Comparison(ok=bool(ok), max_abs_err=float(max_abs), max_rel_err=float(max_rel), atol=tol.atol,
                          message="" if ok else "custom comparison failed")
    if reference.is_full:
        return compare_arrays(result, reference.full, reference.full_error, tol, reference.backend_error)
    try:
        flat = probed_layout(result, operator, x)
    except ValueError as exc:
        return Comparison(ok=False, max_abs_err=float("inf"), max_rel_err=float("inf"), message=str(exc))
    return compare_probes(flat, reference.probes, tol, probes_result_size(reference))


def probed_layout(result: Any, operator: str, x: Any) -> np.ndarray:
    """The result as one float64 vector in the layout of the reference's flattened function.

    A matrix result's blocks (``gradci.scenarios.operators.blocks``) become the row-major (rows,
    columns) matrix; anything else, its leaves in order.
    """
    if OPERATOR_RECORDS[operator].matrix_result:
        return block_matrix(result, x).reshape(-1)
    return _flat(result)


def probes_result_size(reference: Reference) -> int:
    probe = reference.probes[0]
    return probe.u.size * (probe.w.size if probe.w is not None else 1)


def _non_finite_message(flat: np.ndarray, projection: float, probe: Probe) -> str:
    """Which of the result's elements are not finite, where the reference along the probe is."""
    bad = np.flatnonzero(~np.isfinite(flat))
    where = (f"{bad.size} of {flat.size} elements are NaN or infinite (the first is element {int(bad[0])})"
             if bad.size else f"its projection overflows ({projection})")
    return (f"non-finite result: {where}, where the reference is finite (along a probe direction, "
            f"{probe.value:.6g})")
