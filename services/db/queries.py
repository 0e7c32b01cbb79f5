"""Reading runs and results: the filters and pages the REST API and the dashboard ask for."""
from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator
from typing import Any

from sqlalchemy import func, or_, select
from sqlalchemy.orm import Session

from services.db.models import CellStatus, Job, JobStatus, Repository, Result, Run
from services.db.pagination import Page, keyset_page

FULL_SHA_LENGTHS = (40, 64)  # SHA-1 and SHA-256 object names
_LIKE_ESCAPE = "\\"


def get_run(session: Session, run_id: int) -> Run | None:
    return session.get(Run, run_id)


def list_runs(
    session: Session,
    *,
    repo: str | None = None,
    sha: str | None = None,
    pr: int | None = None,
    status: str | None = None,
    limit: int = 50,
    cursor: str | None = None,
) -> Page[Run]:
    """Newest first. ``repo`` matches a repository's URL or owner/name; a ``sha`` shorter than a
    full object name matches as a prefix, as git does."""
    statement = select(Run)
    if repo is not None:
        statement = statement.join(Run.repository).where(or_(Repository.url == repo, Repository.full_name == repo))
    if sha is not None:
        sha = sha.lower()
        statement = statement.where(
            Run.head_sha == sha if len(sha) in FULL_SHA_LENGTHS else Run.head_sha.startswith(sha, autoescape=True)
        )
    if pr is not None:
        statement = statement.where(Run.pr_number == pr)
    if status is not None:
        statement = statement.where(Run.status == status)
    return keyset_page(session, statement, Run.id, limit=limit, cursor=cursor, newest_first=True)


@dataclasses.dataclass(frozen=True)
class ResultFilter:
    status: str | None = None
    backend: str | None = None
    device: str | None = None
    dtype: str | None = None
    scenario: str | None = None  # a name, or an fnmatch-style glob (* and ?)


def glob_to_like(pattern: str) -> str:
    escaped = pattern.replace(_LIKE_ESCAPE, _LIKE_ESCAPE * 2).replace("%", r"\%").replace("_", r"\_")
    return escaped.replace("*", "%").replace("?", "_")


def _filtered_results(run_id: int, where: ResultFilter) -> Any:
    statement = select(Result).where(Result.run_id == run_id)
    for name in ("status", "backend", "device", "dtype"):
        value = getattr(where, name)
        if value is not None:
            statement = statement.where(getattr(Result, name) == value)
    if where.scenario is not None:
        if any(char in where.scenario for char in "*?"):
            statement = statement.where(Result.scenario.like(glob_to_like(where.scenario), escape=_LIKE_ESCAPE))
        else:
            statement = statement.where(Result.scenario == where.scenario)
    return statement


def list_results(
    session: Session,
    run_id: int,
    where: ResultFilter = ResultFilter(),
    *,
    limit: int = 100,
    cursor: str | None = None,
) -> Page[Result]:
    """In the order they were stored."""
    return keyset_page(session, _filtered_results(run_id, where), Result.id, limit=limit, cursor=cursor)


def iter_results_by_matrix_cell(session: Session, run_id: int) -> Iterator[Result]:
    """Every result of a run grouped by backend × device × dtype, streamed (a run may hold
    hundreds of thousands of cells)."""
    statement = (
        select(Result)
        .where(Result.run_id == run_id)
        .order_by(Result.backend, Result.device, Result.dtype, Result.scenario)
        .execution_options(yield_per=1000)
    )
    yield from session.scalars(statement)


def _counts_by_run(session: Session, column: Any, run_ids: Iterable[int], keys: Iterable[str]) -> dict[int, dict[str, int]]:
    run_ids = list(run_ids)
    counts = {run_id: {key: 0 for key in keys} for run_id in run_ids}
    if not run_ids:
        return counts
    table = column.class_
    statement = (
        select(table.run_id, column, func.count())
        .where(table.run_id.in_(run_ids))
        .group_by(table.run_id, column)
    )
    for run_id, value, count in session.execute(statement):
        counts[run_id][value] = count
    return counts


def cell_counts(session: Session, run_ids: Iterable[int]) -> dict[int, dict[str, int]]:
    """Results per cell status (every status present, zeros included) for each run."""
    return _counts_by_run(session, Result.status, run_ids, CellStatus.values())


def job_counts(session: Session, run_ids: Iterable[int]) -> dict[int, dict[str, int]]:
    """Jobs per job status for each run."""
    return _counts_by_run(session, Job.status, run_ids, JobStatus.values())


def unsuccessful_cells(session: Session, run_id: int, statuses: Iterable[str]) -> list[tuple[str, str, str, str]]:
    """(scenario, backend, device, dtype) of the run's cells in ``statuses``."""
    statement = (
        select(Result.scenario, Result.backend, Result.device, Result.dtype)
        .where(Result.run_id == run_id, Result.status.in_(list(statuses)))
        .order_by(Result.id)
    )
    return [tuple(row) for row in session.execute(statement)]  # type: ignore[misc]


def totals_by_status(session: Session, column: Any) -> dict[str, int]:
    """Rows per value of a status column over the whole table (for /metrics)."""
    return dict(session.execute(select(column, func.count()).group_by(column)).all())  # type: ignore[arg-type]
