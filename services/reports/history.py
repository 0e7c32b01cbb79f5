"""A scenario's history: its cells in the last runs that checked it, per backend · device · dtype.

It shows error ÷ tolerance (headroom shrinking before it fails), time and first-call time (a
derivative that became 3× slower is a regression too).

Two statements: the runs (a few hundred rows), then the cells with only the columns a chart needs
(thousands of rows: 500 runs × 28 cells is 14,000, and every column fetched per row costs time).
"""
from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from datetime import datetime
from typing import Any, Protocol

from sqlalchemy import select
from sqlalchemy.orm import Session

from gradci.services.db.models import Result, Run
from gradci.services.reports.diff import tolerance_ratio

RUNS_SHOWN = 50
MAX_RUNS_SHOWN = 500


@dataclasses.dataclass(frozen=True)
class HistoryRun:
    id: int
    head_sha: str | None
    created_at: datetime


class HistoryPoint(Protocol):
    """A cell of the history, as the database row that brings it.

    Read by name; rows are tuples, and a history has thousands of them: wrapping each again would cost
    more than the query.
    """

    run_id: int
    cell_id: int
    backend: str
    device: str
    dtype: str
    status: str
    tolerance_ratio: float | None
    time_ms: float | None
    first_call_ms: float | None

    def __iter__(self) -> Iterator[Any]: ...  # a row: its values in this order


@dataclasses.dataclass(frozen=True)
class ScenarioHistory:
    runs: list[HistoryRun]  # oldest first
    points: Sequence[HistoryPoint]  # oldest run first


def scenario_history(session: Session, scenario: str, runs: int = RUNS_SHOWN, *,
                     repository_id: int | None = None) -> ScenarioHistory:
    """The scenario's cells in the last ``runs`` runs of one repository that checked it, oldest run first.

    The repository None is the built-in library. Per repository: two repositories' scenarios that share
    a name are different scenarios, and one must not add points to the other's history.
    """
    of_repository = select(Run.id).where(Run.repository_id.is_(None) if repository_id is None
                                         else Run.repository_id == repository_id)
    recent = (select(Result.run_id).distinct().where(Result.scenario == scenario, Result.run_id.in_(of_repository))
              .order_by(Result.run_id.desc()).limit(runs).scalar_subquery())
    checked = session.execute(select(Run.id, Run.head_sha, Run.created_at).where(Run.id.in_(recent))
                              .order_by(Run.id))
    statement = (select(Result.run_id, Result.id.label("cell_id"), Result.backend, Result.device, Result.dtype,
                        Result.status, tolerance_ratio(Result).label("tolerance_ratio"), Result.time_ms,
                        Result.first_call_ms)
                 .where(Result.scenario == scenario, Result.run_id.in_(recent))
                 .order_by(Result.run_id))
    # Through the connection (Core), not the ORM session: plain rows, a third cheaper to fetch.
    return ScenarioHistory(runs=[HistoryRun(*row) for row in checked],
                           points=session.connection().execute(statement).all())
