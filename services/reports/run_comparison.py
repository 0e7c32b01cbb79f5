"""Two runs side by side: the cells whose status, error ÷ tolerance or time changed between them.

The biggest changes come first. They are computed by the database (one join on the cell key, counted
and cut to a page there), as ``diff.compare`` does for a run and its base.
"""
from __future__ import annotations

import dataclasses
from typing import Any

from sqlalchemy import and_, case, func, literal, or_, select
from sqlalchemy.orm import Session, aliased

from gradci.scenarios.contract.cell import KEY_FIELDS
from gradci.services.db.models import Result
from gradci.services.reports.diff import tolerance_ratio

# A change worth listing: error ÷ tolerance doubled (or halved), time 1.5× slower (or faster).
RATIO_FACTOR = 2.0
TIME_FACTOR = 1.5
# Rank of a status change above any factor: a cell that changed status always comes first.
STATUS_CHANGE_WEIGHT = 1e300


@dataclasses.dataclass(frozen=True)
class ChangedCell:
    scenario: str
    backend: str
    device: str
    dtype: str
    before_id: int
    after_id: int
    before_status: str
    after_status: str
    before_ratio: float | None
    after_ratio: float | None
    before_time_ms: float | None
    after_time_ms: float | None
    ratio_factor: float | None  # how many times larger the bigger error ÷ tolerance is
    time_factor: float | None


def _factor(before: Any, after: Any) -> Any:
    """max(before/after, after/before) as SQL; NULL unless both are positive."""
    return case((and_(before > 0, after > 0), case((before > after, before / after), else_=after / before)))


def changed_cells(session: Session, before_id: int, after_id: int, *, limit: int, offset: int
                  ) -> tuple[list[ChangedCell], int]:
    """A page of the cells of run ``after_id`` that changed against run ``before_id``.

    Also how many changed in all. Only cells present in both count; status changes come first, then by
    the larger factor.
    """
    before, after = aliased(Result), aliased(Result)
    ratio_factor = _factor(tolerance_ratio(before), tolerance_ratio(after))
    time_factor = _factor(before.time_ms, after.time_ms)
    status_changed = before.status != after.status
    largest = case((func.coalesce(ratio_factor, 1) > func.coalesce(time_factor, 1), ratio_factor),
                   else_=func.coalesce(time_factor, 1))
    rank = case((status_changed, literal(STATUS_CHANGE_WEIGHT)), else_=largest)
    statement = (
        select(after.scenario, after.backend, after.device, after.dtype, before.id, after.id, before.status,
               after.status, tolerance_ratio(before), tolerance_ratio(after), before.time_ms, after.time_ms,
               ratio_factor, time_factor, func.count().over())
        .join(before, and_(before.run_id == before_id, *(getattr(before, f) == getattr(after, f) for f in KEY_FIELDS)))
        .where(after.run_id == after_id,
               or_(status_changed, ratio_factor >= RATIO_FACTOR, time_factor >= TIME_FACTOR))
        .order_by(rank.desc(), after.id)
        .limit(limit).offset(offset))
    rows = session.execute(statement).all()
    total = rows[0][-1] if rows else 0
    return [ChangedCell(*row[:-1]) for row in rows], total
