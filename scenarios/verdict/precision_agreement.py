"""A lower-precision cell must agree with its backend's float64 result; where it does not, the reference decides.

A probe reference checks a large float32 result along a few directions at float32's tolerance, and
one wrong entry among thousands hides below it: a 1 % error in one of 1,000 gradient entries moves a
projection by far less than float32's allowance. The same backend's float64 cell on the same device,
where it passed, knows every entry to float64's accuracy, so the lower-precision result is compared
with it entry by entry at the tolerance modes are compared with, and a disagreement is put to a
reference along it, as between modes (``mode_agreement``). Only the lower-precision cell can fail
here: the float64 cell passed its own, stricter check. Where that reference cannot tell, nothing
fails, and the cell says so.
"""
from __future__ import annotations

from typing import Any

from gradci.scenarios.authoring.scenario import Scenario
from gradci.scenarios.contract.cell import Cell, Status
from gradci.scenarios.numerics.tolerances import tolerance_for
from gradci.scenarios.verdict.mode_agreement import decide_along, first_disagreement

ANCHOR_DTYPE = "float64"


def check_precisions_agree(cells: list[Cell], results: dict, scenario: Scenario, tangent: Any) -> None:
    """Fail each passing lower-precision cell the reference finds wrong where it departs from float64's."""
    anchors = {(c.backend, c.device): c for c in cells if c.status == Status.PASS and c.dtype == ANCHOR_DTYPE}
    for cell in cells:
        anchor = anchors.get((cell.backend, cell.device))
        if anchor is not None and cell.status == Status.PASS and cell.dtype != ANCHOR_DTYPE:
            _settle(cell, anchor, results, scenario, tangent)


def _settle(cell: Cell, anchor: Cell, results: dict, scenario: Scenario, tangent: Any) -> None:
    tol = tolerance_for(cell.dtype, rtol=scenario.rtol, atol=scenario.atol)
    for agreement, low, high, t in first_disagreement(cell, results[cell.key], results[anchor.key], tangent):
        verdict = decide_along(scenario, t, low, high, tol)[0]
        if verdict is None:
            cell.message = (f"note: departs from this backend's {ANCHOR_DTYPE} result beyond {cell.dtype}'s "
                            f"agreement tolerance ({agreement.message}); the reference along it cannot tell")
        elif not verdict.ok:
            cell.status = Status.FAIL
            cell.message = (f"{cell.dtype} and {ANCHOR_DTYPE} results of {cell.backend} disagree "
                            f"({_as_float64(agreement.message)}), and the reference along the disagreement finds "
                            f"the {cell.dtype} one wrong: {verdict.message} "
                            f"(the {ANCHOR_DTYPE} cell passed: look for a rule or kernel path taken only in "
                            f"{cell.dtype})")


def _as_float64(message: str) -> str:
    """compare_arrays' message with its "reference" named for what it is here: the float64 result."""
    return message.replace("reference", f"{ANCHOR_DTYPE} result")
