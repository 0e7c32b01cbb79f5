"""Per-dtype default tolerances, as data.

A backend's result ``a`` passes against the float64 reference ``r`` where, elementwise,

    |a - r| <= atol * scale + rtol * |r| + REFERENCE_ERROR_FACTOR * err

with ``scale = max(1, max|r|)`` (so atol is relative to the result's magnitude, which keeps
near-zero components of a large gradient from failing on rounding) and ``err`` the finite-difference
library's own error estimate for that component. For random-probe checks the same formula applies
to each probe u·R, with ``|r|`` replaced by the probe's noise scale sqrt(Σ u_i² R_i²).

A reference is not trusted blindly. Where ``err`` exceeds the dtype's own
allowance ``atol * scale + rtol * |r|``, the reference cannot decide that element at this dtype: a
result beyond even the widened threshold still fails, any other is no verdict (the cell is
``error``, never ``pass``). The scale comes only from elements whose error is within tolerance at
their own magnitude, so a huge, unreliable reference value cannot loosen atol for the rest.

| dtype    | rtol   | atol   | why                                                              |
| -------- | ------ | ------ | ---------------------------------------------------------------- |
| float64  | 1e-6   | 1e-9   | catches a derivative off by a relative 1e-4 (gradcheck's 1e-3 does not) |
| float32  | 2e-3   | 2e-4   | eps 1.2e-7 times accumulation over matmuls, solves, recurrences  |
| float16  | 2e-2   | 2e-2   | eps 9.8e-4                                                       |
| bfloat16 | 6e-2   | 6e-2   | eps 7.8e-3                                                       |
| float32 with TF32 | 1e-2 | 1e-3 | GPU matmuls, convolutions in TF32: 10-bit mantissa, ~5e-4 a product |

The TF32 row applies where the cell's framework says TF32 was on while it ran, on a real GPU (torch's
``matmul.allow_tf32`` or ``cudnn.allow_tf32``; JAX's default matmul precision other than "highest",
XLA's default on GPUs); ``Scenario(precision="highest")`` turns it off, and the plain float32 row holds.

**CPU–GPU agreement** (``gradci.scenarios.verdict.device_agreement``): a cuda cell's result against
the CPU result of the same backend and dtype, with the same formula (``r`` the CPU result, no error
estimate). Tighter than the finite-difference tolerances: both sides round the same way up to the
order of operations, so a few ulps accumulated over a computation is all a correct kernel may differ
by.

| dtype    | rtol   | atol   |
| -------- | ------ | ------ |
| float64  | 1e-9   | 1e-11  |
| float32  | 2e-5   | 2e-6   |
| float16  | 5e-3   | 5e-3   |
| bfloat16 | 3e-2   | 3e-2   |
| float32 with TF32 | 2e-3 | 2e-4 |
"""
from __future__ import annotations

import dataclasses

import numpy as np

from gradci.scenarios.numerics.reference_values import Reference, flat_leaves

# The reference's error estimate is an estimate: widen by a safety factor rather than trust it exactly.
REFERENCE_ERROR_FACTOR = 10.0
# A reference decides an element only where its error estimate is within the dtype's allowance, so
# that the widening above never loosens a tolerance more than (1 + REFERENCE_ERROR_FACTOR)-fold.


@dataclasses.dataclass(frozen=True)
class Tolerance:
    rtol: float
    atol: float

    def widened(self, rtol: float | None = None, atol: float | None = None) -> Tolerance:
        """The scenario's own overrides, where it gives them."""
        return Tolerance(rtol=self.rtol if rtol is None else rtol, atol=self.atol if atol is None else atol)


DEFAULT_TOLERANCES: dict[str, Tolerance] = {
    "float64": Tolerance(rtol=1e-6, atol=1e-9),
    "float32": Tolerance(rtol=2e-3, atol=2e-4),
    "float16": Tolerance(rtol=2e-2, atol=2e-2),
    "bfloat16": Tolerance(rtol=6e-2, atol=6e-2),
}

DTYPES = tuple(DEFAULT_TOLERANCES)
# float32 whose matmuls and convolutions ran in TF32 on a GPU (``Tolerance`` tables' "float32 with TF32").
TF32_TOLERANCE = Tolerance(rtol=1e-2, atol=1e-3)

AGREEMENT_TOLERANCES: dict[str, Tolerance] = {
    "float64": Tolerance(rtol=1e-9, atol=1e-11),
    "float32": Tolerance(rtol=2e-5, atol=2e-6),
    "float16": Tolerance(rtol=5e-3, atol=5e-3),
    "bfloat16": Tolerance(rtol=3e-2, atol=3e-2),
}
TF32_AGREEMENT_TOLERANCE = Tolerance(rtol=2e-3, atol=2e-4)


def allowance(tol: Tolerance, magnitude: np.ndarray, scale: float | np.ndarray) -> np.ndarray:
    """What the dtype allows before the reference's own error is added: atol·scale + rtol·|r|."""
    return tol.atol * scale + tol.rtol * magnitude


def undecided(error: np.ndarray, tol: Tolerance, magnitude: np.ndarray, scale: float | np.ndarray) -> np.ndarray:
    """Where the reference's error estimate is too large to decide a result at this tolerance."""
    return error > allowance(tol, magnitude, scale)


def reliable_scale(reference: np.ndarray, error: np.ndarray, tol: Tolerance) -> float:
    """max(1, max|r|) over the finite elements whose reference decides them at their own magnitude."""
    magnitude = np.abs(reference)
    trusted = np.isfinite(reference) & ~undecided(error, tol, magnitude, np.maximum(1.0, magnitude))
    return max(1.0, float(np.max(magnitude[trusted]))) if np.any(trusted) else 1.0


def strictest(tolerances: list[Tolerance]) -> Tolerance:
    """The tightest of several tolerances: what a reference must be able to decide for all of them."""
    return Tolerance(rtol=min(t.rtol for t in tolerances), atol=min(t.atol for t in tolerances))


def required(dtypes: tuple[str, ...], rtol: float | None = None, atol: float | None = None) -> Tolerance:
    """What a scenario's reference must decide: the strictest tolerance of its dtypes, with its overrides."""
    return strictest([tolerance_for(dtype, rtol, atol) for dtype in dtypes])


def decides(reference: Reference, tol: Tolerance) -> bool:
    """Whether the reference's error estimate is small enough everywhere to decide a result at ``tol``.

    The test is the comparison's own (``undecided``), element by element or probe by probe.
    """
    if reference.is_full:
        values, errors = flat_leaves(reference.full), flat_leaves(reference.full_error)
        scale = reliable_scale(values, errors, tol)
        return not np.any(undecided(errors, tol, np.abs(values), scale))
    return all(not undecided(np.array(p.error), tol, np.array(abs(p.value)), reliable_scale(
        np.array([p.value]), np.array([p.error]), tol)) for p in reference.probes)



def tolerance_for(dtype: str, rtol: float | None = None, atol: float | None = None, tf32: bool = False) -> Tolerance:
    """The dtype's tolerance, with a scenario's own rtol and atol where it gives them.

    TF32's where ``tf32``: float32 products ran in TF32.
    """
    return _row(DEFAULT_TOLERANCES, TF32_TOLERANCE, dtype, tf32).widened(rtol=rtol, atol=atol)


def agreement_tolerance(dtype: str, tf32: bool = False) -> Tolerance:
    """How far a cuda result may be from the CPU's of the same backend and dtype."""
    return _row(AGREEMENT_TOLERANCES, TF32_AGREEMENT_TOLERANCE, dtype, tf32)


def _row(table: dict[str, Tolerance], tf32_row: Tolerance, dtype: str, tf32: bool) -> Tolerance:
    if dtype not in table:
        raise ValueError(f"unknown dtype {dtype!r}; expected one of {', '.join(DTYPES)}")
    return tf32_row if tf32 and dtype == "float32" else table[dtype]
