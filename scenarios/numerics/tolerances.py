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
from typing import Any

import numpy as np

from gradci.scenarios.numerics.reference_values import Reference, flat_leaves

# The reference's error estimate is an estimate: widen by a safety factor rather than trust it exactly.
REFERENCE_ERROR_FACTOR = 10.0
# A reference decides an element only where its error estimate is within the dtype's allowance, so
# that the widening above never loosens a tolerance more than (1 + REFERENCE_ERROR_FACTOR)-fold.


@dataclasses.dataclass(frozen=True)
class Tolerance:
    """rtol and atol, and the floors the comparison's scale and threshold keep at f and x (``at``).

    ``eps``: where given (float32), atol is relative to the result's own scale however small it is, down
    to the rounding floor ``scale_floor``; None keeps ``max(1, max|r|)``. ``absolute_floor``: the least
    error estimate a second-order reference is held to (``undecided``), what float64 rounding of f lets
    a second difference resolve.
    """

    rtol: float
    atol: float
    eps: float | None = None
    scale_floor: float = 1.0
    absolute_floor: float = 0.0

    def widened(self, rtol: float | None = None, atol: float | None = None) -> Tolerance:
        """The scenario's own overrides, where it gives them."""
        return dataclasses.replace(self, rtol=self.rtol if rtol is None else rtol,
                                   atol=self.atol if atol is None else atol)

    def at(self, f_scale: float, x_scale: float, order: int) -> Tolerance:
        """The tolerance with its floors for a derivative of ``order`` of f (|f(x)| ~ ``f_scale``) at x.

        ``x_scale``: x's root-mean-square size, taken as at least 1. A derivative's natural size is
        |f|/|x|^order; rounding of f makes what lies far below it undecidable (``rounding_floors``).
        """
        scale_floor, absolute_floor = rounding_floors(self, f_scale, x_scale, order)
        return dataclasses.replace(self, scale_floor=scale_floor, absolute_floor=absolute_floor)


FLOAT32_EPS = float(np.finfo(np.float32).eps)
DEFAULT_TOLERANCES: dict[str, Tolerance] = {
    "float64": Tolerance(rtol=1e-6, atol=1e-9),
    "float32": Tolerance(rtol=2e-3, atol=2e-4, eps=FLOAT32_EPS),
    "float16": Tolerance(rtol=2e-2, atol=2e-2),
    "bfloat16": Tolerance(rtol=6e-2, atol=6e-2),
}

DTYPES = tuple(DEFAULT_TOLERANCES)
# float32 whose matmuls and convolutions ran in TF32 on a GPU (``Tolerance`` tables' "float32 with TF32").
TF32_TOLERANCE = Tolerance(rtol=1e-2, atol=1e-3, eps=FLOAT32_EPS)

AGREEMENT_TOLERANCES: dict[str, Tolerance] = {
    "float64": Tolerance(rtol=1e-9, atol=1e-11),
    "float32": Tolerance(rtol=2e-5, atol=2e-6),
    "float16": Tolerance(rtol=5e-3, atol=5e-3),
    "bfloat16": Tolerance(rtol=3e-2, atol=3e-2),
}
TF32_AGREEMENT_TOLERANCE = Tolerance(rtol=2e-3, atol=2e-4)


# A float32 derivative's rounding, in ulps of f's own size over x's: what a correct kernel may be off by
# where the derivative is far smaller than f/x (cancelling terms of that size). Its scale floor is that
# over atol.
RESULT_ROUNDING_ULPS = 64
# Where f and the derivative are both 0 (a product with two zero factors) nothing gives a scale: atol is
# relative to a thousandth at least, so a 5 % error still fails on derivatives of 1e-5.
MIN_SCALE = 1e-3
# A float64 second difference of f resolves K·eps·|f| / h² at best; at a step of 2.5e-4 of x's size
# (where a reference started at 1e-3 to step over a kink or a max-switch further away ends) with K = 16
# (the stencil's weights and f's own rounding), that is the least threshold a second-order result can be
# held to.
SECOND_DIFFERENCE_STEP = 2.5e-4
SECOND_DIFFERENCE_ULPS = 16


def rounding_floors(tol: Tolerance, f_scale: float, x_scale: float, order: int) -> tuple[float, float]:
    """(scale_floor, absolute_floor) of ``Tolerance.at``."""
    length = max(1.0, x_scale)
    natural = f_scale / length ** order
    scale_floor = 1.0 if tol.eps is None else max(MIN_SCALE, RESULT_ROUNDING_ULPS * tol.eps * natural / tol.atol)
    absolute_floor = (SECOND_DIFFERENCE_ULPS * float(np.finfo(np.float64).eps) * natural / SECOND_DIFFERENCE_STEP ** 2
                      if order >= 2 else 0.0)
    return scale_floor, absolute_floor


def at_point(tol: Tolerance, value: Any, x: Any, order: int) -> Tolerance:
    """``tol`` with its rounding floors for a derivative of ``order`` of f, valued ``value`` at ``x`` (pytrees)."""
    f_values, x_values = flat_leaves(value), flat_leaves(x)
    f_scale = float(np.max(np.abs(f_values[np.isfinite(f_values)]), initial=0.0))
    x_scale = float(np.sqrt(np.mean(x_values ** 2))) if x_values.size else 0.0
    return tol.at(f_scale, x_scale if np.isfinite(x_scale) else 0.0, order)


def allowance(tol: Tolerance, magnitude: np.ndarray, scale: float | np.ndarray) -> np.ndarray:
    """What the dtype allows before the reference's own error is added: atol·scale + rtol·|r|."""
    return tol.atol * scale + tol.rtol * magnitude


def undecided(error: np.ndarray, tol: Tolerance, magnitude: np.ndarray, scale: float | np.ndarray) -> np.ndarray:
    """Where the reference's error estimate is too large to decide a result at this tolerance.

    A second-order reference is held to no less than what a float64 second difference can resolve
    (``absolute_floor``): an exact zero's estimate of a few 1e-9 is then decided. The floor only
    judges the reference: a result is still compared within the allowance and the reference's own
    estimated error, so a small error in a large second derivative is not let through by it.
    """
    return error > allowance(tol, magnitude, scale) + tol.absolute_floor


def reliable_scale(reference: np.ndarray, error: np.ndarray, tol: Tolerance) -> float:
    """max(floor, max|r|) over the finite elements whose reference decides them at their own magnitude.

    The floor is 1, or float32's rounding floor (``Tolerance.at``).
    """
    magnitude = np.abs(reference)
    floor = tol.scale_floor
    trusted = np.isfinite(reference) & ~undecided(error, tol, magnitude, np.maximum(floor, magnitude))
    return max(floor, float(np.max(magnitude[trusted]))) if np.any(trusted) else floor


def strictest(tolerances: list[Tolerance]) -> Tolerance:
    """The tightest of several tolerances: what a reference must be able to decide for all of them.

    float64's, where there is one: a float32 scale below 1 is still far looser than float64's atol.
    """
    return Tolerance(rtol=min(t.rtol for t in tolerances), atol=min(t.atol for t in tolerances),
                     eps=None if any(t.eps is None for t in tolerances) else min(t.eps or 0.0 for t in tolerances))


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
