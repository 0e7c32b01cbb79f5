"""Forward and reverse modes of one framework must agree; where they do not, the reference decides.

With probe references a wrong element of a large result can hide below the tolerance, so passing
forward and reverse cells are compared elementwise. A disagreement is then put to a new
finite-difference reference taken along it (the normalised difference for results like x, the worst
element's row and column for matrix results): only the mode that reference finds wrong fails; only
where it cannot tell (or finds both wrong) do both fail, saying so.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import optree

from gradci.scenarios.authoring.scenario import Scenario, Tangents
from gradci.scenarios.contract.cell import Cell, Status
from gradci.scenarios.numerics.tolerances import Tolerance, tolerance_for
from gradci.scenarios.operators.records import OPERATOR_RECORDS
from gradci.scenarios.reference.finite_differences import FDSettings, ReferenceBuilder
from gradci.scenarios.reference.flat_function import ravel
from gradci.scenarios.verdict.against_reference import Comparison, compare_arrays, compare_to_reference, probed_layout


def check_modes_agree(cells: list[Cell], results: dict, scenario: Scenario, tangent: Any) -> None:
    """Fail the mode the reference finds wrong wherever passing forward and reverse cells disagree.

    Cells are compared within one framework, device and dtype.
    """
    groups: dict[tuple, list[Cell]] = {}
    for cell in cells:
        if cell.status == Status.PASS and cell.mode in ("forward", "reverse"):
            groups.setdefault((cell.framework, cell.device, cell.dtype), []).append(cell)
    for group in groups.values():
        for f_cell in (c for c in group if c.mode == "forward"):
            for r_cell in (c for c in group if c.mode == "reverse"):
                _settle(f_cell, r_cell, results, scenario, tangent)


def _settle(a_cell: Cell, b_cell: Cell, results: dict, scenario: Scenario, tangent: Any) -> None:
    if a_cell.status != Status.PASS or b_cell.status != Status.PASS:  # settled by an earlier pair
        return
    tol = tolerance_for(a_cell.dtype, rtol=scenario.rtol, atol=scenario.atol)
    for agreement, a, b, t in first_disagreement(a_cell, results[a_cell.key], results[b_cell.key], tangent):
        verdicts = decide_along(scenario, t, a, b, tol)
        wrong = [cell for cell, verdict in zip((a_cell, b_cell), verdicts) if verdict is not None
                 and not verdict.ok]
        if len(wrong) == 1:
            right = b_cell if wrong[0] is a_cell else a_cell
            verdict = verdicts[0] if wrong[0] is a_cell else verdicts[1]
            assert verdict is not None  # the wrong cell's verdict decided it
            _fail(wrong[0], f"forward and reverse modes disagree ({right.backend}); the reference along the "
                            f"disagreement finds this one wrong: {verdict.message}")
        else:
            why = "finds both wrong" if wrong else "cannot decide which is wrong"
            for cell, other in ((a_cell, b_cell), (b_cell, a_cell)):
                _fail(cell, f"forward and reverse modes disagree ({other.backend}): {agreement.message}; "
                            f"the reference along the disagreement {why}")


def first_disagreement(cell: Cell, a_result: Any, b_result: Any,
                       tangent: Any) -> list[tuple[Comparison, Any, Any, Any]]:
    """The first (co)tangent's results that disagree elementwise, at twice ``cell``'s tolerance: [] or one.

    Each as (the agreement's comparison, a's result, b's, the tangent).
    """
    agreement_tol = Tolerance(rtol=2 * (cell.rtol or 0), atol=2 * tolerance_for(cell.dtype).atol)
    for a, b, t in zip(per_tangent(a_result, tangent), per_tangent(b_result, tangent), per_tangent(tangent, tangent)):
        agreement = compare_arrays(a, b, optree.tree_map(np.zeros_like, b), agreement_tol)
        if not agreement.ok:
            return [(agreement, a, b, t)]
    return []


def _fail(cell: Cell, message: str) -> None:
    cell.status, cell.message = Status.FAIL, message


def per_tangent(tree: Any, tangent: Any) -> list:
    return list(tree) if isinstance(tangent, Tangents) else [tree]


def decide_along(scenario: Scenario, t: Any, a: Any, b: Any, tol: Tolerance) -> tuple[Comparison | None, ...]:
    """Each result compared with a reference along the direction they disagree in.

    None for both where that reference cannot be computed or cannot decide.
    """
    record = OPERATOR_RECORDS[scenario.operator]
    derivative = (lambda r: r[1]) if record.returns_value else (lambda r: r)
    def layout(result):  # a matrix result's blocks as its (rows, columns) matrix, row-major
        return probed_layout(derivative(result), scenario.operator, scenario.x)

    difference = np.nan_to_num(layout(a) - layout(b))
    m = ravel(scenario.x)[0].size
    if record.matrix_result:
        row, column = divmod(int(np.argmax(np.abs(difference))), m)
        along: list[tuple[np.ndarray, np.ndarray | None]] = [(_unit(m, column), _unit(difference.size // m, row))]
    else:  # results like x (results like f(x) come from full references, whatever ``along`` says)
        along = [(difference / np.linalg.norm(difference), None)]
    try:
        reference = record.finite_differences(ReferenceBuilder(scenario, FDSettings(), along=along), t)
    except Exception:  # noqa: BLE001 - no reference along it: no decision
        return None, None
    verdicts = tuple(compare_to_reference(r, reference, tol, scenario.operator, x=scenario.x) for r in (a, b))
    if any(v.unreliable for v in verdicts):
        return None, None
    return verdicts


def _unit(size: int, index: int) -> np.ndarray:
    e = np.zeros(size)
    e[index] = 1.0
    return e
