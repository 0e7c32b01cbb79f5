"""The diff of a run's cells against its base run's, computed by the database.

The two runs are joined on the cell key (scenario, backend, device, dtype), each pair classified,
counted and ranked in one statement, and only the top of each kind sent back.

A pair is a **regression** when the base passed and the head neither passed nor was skipped, a
**fix** when the base failed or errored and the head passed, a **near miss** when the head passed
using over half its tolerance and at least 10× what the base used. Within a kind, the cells that
used the most of their tolerance come first (cells with no errors recorded, such as errors, before
them all): the worst news leads.
"""
from __future__ import annotations

from typing import Any, NamedTuple

from sqlalchemy import and_, case, func, literal, or_, select
from sqlalchemy.orm import Session, aliased

from gradci.scenarios.contract.cell import KEY_FIELDS, Status
from gradci.scenarios.contract.coverage import MISSING
from gradci.services.db.models import Result
from gradci.services.reports.report_record import BRIEF_FIELDS, CellBrief

NEAR_MISS_RATIO = 0.5
NEAR_MISS_GROWTH = 10.0
KINDS = ("regressions", "fixes", "near_misses")


class Changes(NamedTuple):
    """The top of each kind, and how many cells of each kind there are."""

    cells: dict[str, list[CellBrief]]
    counts: dict[str, int]

    @classmethod
    def none(cls) -> Changes:
        """No base run, nothing compared."""
        return cls({kind: [] for kind in KINDS}, dict.fromkeys(KINDS, 0))


def _share(error: Any, tolerance: Any) -> Any:
    return case((and_(error.is_not(None), tolerance.is_not(None), tolerance != 0), error / tolerance))


def tolerance_ratio(cell: Any) -> Any:
    """How much of its tolerance a cell used, as SQL.

    min(max_abs_err/atol, max_rel_err/rtol), since a component passes when either bound holds; NULL when
    the cell has no errors recorded.
    """
    absolute, relative = _share(cell.max_abs_err, cell.atol), _share(cell.max_rel_err, cell.rtol)
    return case((absolute.is_(None), relative), (relative.is_(None), absolute), (absolute < relative, absolute),
                else_=relative)


def stored_tolerance_ratio(cell: Any) -> float | None:
    """``tolerance_ratio`` of a cell already loaded (a page of rows).

    The same rule in Python, held to the SQL by a test.
    """
    shares = [error / tolerance for error, tolerance in ((cell.max_abs_err, cell.atol), (cell.max_rel_err, cell.rtol))
              if error is not None and tolerance]
    return min(shares) if shares else None


def _kind(head: Any, base: Any, ratio: Any, base_ratio: Any) -> Any:
    passed = Status.PASS.value  # bound as the stored word
    near_miss = and_(head.status == passed, ratio > NEAR_MISS_RATIO,
                     or_(base_ratio.is_(None), base_ratio == 0, ratio >= NEAR_MISS_GROWTH * base_ratio))
    return case((and_(base.status == passed, head.status.not_in((passed, Status.SKIP.value))), literal("regressions")),
                (and_(base.status.in_(MISSING), head.status == passed), literal("fixes")),
                (near_miss, literal("near_misses")))


def compare(session: Session, head_id: int, base_id: int, limit: int) -> Changes:
    """Regressions, fixes and near misses of run ``head_id`` against run ``base_id``, ``limit`` of each."""
    head, base = aliased(Result), aliased(Result)
    ratio, base_ratio = tolerance_ratio(head), tolerance_ratio(base)
    pairs = (select(_kind(head, base, ratio, base_ratio).label("kind"), head.id.label("head_id"),
                    ratio.label("tolerance_ratio"), base.status.label("base_status"),
                    base_ratio.label("base_tolerance_ratio"), *(getattr(head, f) for f in BRIEF_FIELDS))
             .join(base, and_(base.run_id == base_id, *(getattr(base, f) == getattr(head, f) for f in KEY_FIELDS)))
             .where(head.run_id == head_id)
             .subquery())
    changed = select(pairs).where(pairs.c.kind.is_not(None)).subquery()
    rank = func.row_number().over(partition_by=changed.c.kind,
                                  order_by=(changed.c.tolerance_ratio.desc().nulls_first(), changed.c.head_id))
    ranked = select(changed, rank.label("rank"), func.count().over(partition_by=changed.c.kind).label("total")
                    ).subquery()
    rows = session.execute(select(ranked).where(ranked.c.rank <= limit).order_by(ranked.c.kind, ranked.c.rank))
    found = Changes.none()
    for row in rows.mappings():
        found.counts[row["kind"]] = row["total"]
        found.cells[row["kind"]].append(CellBrief(
            **{field: row[field] for field in (*BRIEF_FIELDS, "tolerance_ratio", "base_status",
                                                "base_tolerance_ratio")}))
    return found
