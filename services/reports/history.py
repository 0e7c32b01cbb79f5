"""A scenario's history: its cells in the last runs that checked it, per backend · device · dtype —
error ÷ tolerance (headroom shrinking before it fails), time and first-call time (a derivative that
became 3× slower is a regression too)."""
from __future__ import annotations

import dataclasses
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from services.db.models import Result, Run
from services.reports.diff import tolerance_ratio

RUNS_SHOWN = 50
MAX_RUNS_SHOWN = 500


@dataclasses.dataclass(frozen=True)
class HistoryPoint:
    run_id: int
    head_sha: str | None
    created_at: datetime
    cell_id: int
    backend: str
    device: str
    dtype: str
    status: str
    tolerance_ratio: float | None
    time_ms: float | None
    first_call_ms: float | None


def scenario_history(session: Session, scenario: str, runs: int = RUNS_SHOWN) -> list[HistoryPoint]:
    """The scenario's cells in the last ``runs`` runs that checked it, oldest run first."""
    recent = (select(Result.run_id).distinct().where(Result.scenario == scenario)
              .order_by(Result.run_id.desc()).limit(runs).scalar_subquery())
    statement = (select(Run.id, Run.head_sha, Run.created_at, Result.id, Result.backend, Result.device,
                        Result.dtype, Result.status, tolerance_ratio(Result), Result.time_ms, Result.first_call_ms)
                 .join(Run, Run.id == Result.run_id)
                 .where(Result.scenario == scenario, Result.run_id.in_(recent))
                 .order_by(Result.run_id, Result.backend, Result.device, Result.dtype))
    return [HistoryPoint(*row) for row in session.execute(statement)]
