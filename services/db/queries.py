"""Reading runs and results: the filters and pages the REST API and the dashboard ask for."""
from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import func, or_, select, text
from sqlalchemy.orm import Session

from gradci.scenarios.contract.cell import KEY_FIELDS, Status
from gradci.services.db.models import Job, JobStatus, Repository, Result, Run, Trigger
from gradci.services.db.pagination import Page, grouped_keyset_page, keyset_page

FULL_SHA_LENGTHS = (40, 64)  # SHA-1 and SHA-256 object names
_LIKE_ESCAPE = "\\"


def without_jit(session: Session) -> None:
    """Turn off PostgreSQL's JIT compilation for the rest of the transaction.

    It compiles the plans it expects to be expensive — a join or a sort over a million results — and the
    compiling took seconds (6 s for a report's join measured here) where the statement itself takes well
    under one.
    """
    if session.get_bind().dialect.name == "postgresql":
        session.execute(text("SET LOCAL jit = off"))


def get_run(session: Session, run_id: int) -> Run | None:
    return session.get(Run, run_id)


@dataclasses.dataclass(frozen=True)
class Visible:
    """The runs an asker may list (services/access decides).

    Every run (``everything``), or those of ``repository_ids`` and, with ``library``, the built-in
    library's.
    """

    everything: bool = False
    repository_ids: frozenset[int] = frozenset()
    library: bool = False


EVERYTHING = Visible(everything=True)


def visible_runs(visible: Visible) -> Any:
    """The condition on runs that ``visible`` lets through."""
    condition = Run.repository_id.in_(sorted(visible.repository_ids))
    return or_(condition, Run.repository_id.is_(None)) if visible.library else condition


@dataclasses.dataclass(frozen=True)
class RunFilter:
    visible: Visible = EVERYTHING
    repo: str | None = None  # a repository's URL or owner/name
    sha: str | None = None  # shorter than a full object name: a prefix, as git matches it
    pr: int | None = None
    status: str | None = None
    trigger: str | None = None


def list_runs(session: Session, where: RunFilter = RunFilter(), *, limit: int = 50,
              cursor: str | None = None) -> Page[Run]:
    """The runs ``where`` chooses, newest first."""
    statement = select(Run)
    if not where.visible.everything:
        statement = statement.where(visible_runs(where.visible))
    if where.repo is not None:
        statement = statement.join(Run.repository).where(
            or_(Repository.url == where.repo, Repository.full_name == where.repo))
    if where.sha is not None:
        sha = where.sha.lower()
        statement = statement.where(
            Run.head_sha == sha if len(sha) in FULL_SHA_LENGTHS else Run.head_sha.startswith(sha, autoescape=True)
        )
    if where.pr is not None:
        statement = statement.where(Run.pr_number == where.pr)
    if where.status is not None:
        statement = statement.where(Run.status == where.status)
    if where.trigger is not None:
        statement = statement.where(Run.trigger == where.trigger)
    return keyset_page(session, statement, Run.id, limit=limit, cursor=cursor, newest_first=True)


@dataclasses.dataclass(frozen=True)
class ResultFilter:
    status: str | None = None
    backend: str | None = None
    device: str | None = None
    dtype: str | None = None
    scenario: str | None = None  # a name, or an fnmatch-style glob (* and ?)
    operator: str | None = None
    family: str | None = None  # the scenario name's first part: "nn" holds "nn/…"


def glob_to_like(pattern: str) -> str:
    escaped = pattern.replace(_LIKE_ESCAPE, _LIKE_ESCAPE * 2).replace("%", r"\%").replace("_", r"\_")
    return escaped.replace("*", "%").replace("?", "_")


def _run_results(run_id: int) -> Any:
    """The run's results, bounded below by the run's first id (one seek in (run_id, id)).

    Without the bound PostgreSQL may take a page "in id order" by walking the primary key from the
    table's first row, filtering out every older run's rows — 0.35 s for the first page of a run stored
    after a run of a million; with it, that walk starts at the run's own first row.
    """
    first_id = select(func.min(Result.id)).where(Result.run_id == run_id).scalar_subquery()
    return select(Result).where(Result.run_id == run_id, Result.id >= first_id)


def filtered_results(run_id: int, where: ResultFilter) -> Any:
    statement = _run_results(run_id)
    for name in ("status", "backend", "device", "dtype", "operator"):
        value = getattr(where, name)
        if value is not None:
            statement = statement.where(getattr(Result, name) == value)
    if where.scenario is not None:
        if any(char in where.scenario for char in "*?"):
            statement = statement.where(Result.scenario.like(glob_to_like(where.scenario), escape=_LIKE_ESCAPE))
        else:
            statement = statement.where(Result.scenario == where.scenario)
    if where.family is not None:
        statement = statement.where(Result.scenario.startswith(f"{where.family}/", autoescape=True))
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
    return keyset_page(session, filtered_results(run_id, where), Result.id, limit=limit, cursor=cursor)


# The order a run's page lists its cells in: what needs attention first.
ATTENTION_ORDER = tuple(status.value for status in (Status.FAIL, Status.ERROR, Status.XPASS, Status.PASS, Status.XFAIL,
                                                    Status.SKIP))


def results_by_status(
    session: Session,
    run_id: int,
    order: Sequence[str] = ATTENTION_ORDER,
    *,
    where: ResultFilter = ResultFilter(),
    limit: int = 100,
    cursor: str | None = None,
) -> Page[Result]:
    """The run's cells (those ``where`` admits) status by status in ``order``.

    Each status's cells come in stored order: an index seek per status on (run_id, status, id), however
    many cells the run has.
    """
    order = [status for status in order if where.status in (None, status)]
    groups = [filtered_results(run_id, where).where(Result.status == status) for status in order]
    return grouped_keyset_page(session, groups, Result.id, limit=limit, cursor=cursor)


def _counts_by_run(session: Session, column: Any, run_ids: Iterable[int],
                   keys: Iterable[str]) -> dict[int, dict[str, int]]:
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
    return _counts_by_run(session, Result.status, run_ids, Status.values())


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
    return [(scenario, backend, device, dtype) for scenario, backend, device, dtype in session.execute(statement)]


def totals_by_status(session: Session, column: Any) -> dict[str, int]:
    """Rows per value of a status column over the whole table (for /metrics)."""
    return dict(session.execute(select(column, func.count()).group_by(column)).all())


def latest_baseline_run(session: Session, full_name: str, statuses: Iterable[str]) -> Run | None:
    """The repository's latest run of its default branch (a push run) whose status is in ``statuses``."""
    return session.scalar(
        select(Run).join(Run.repository)
        .where(Repository.full_name == full_name, Run.trigger == Trigger.push.value, Run.status.in_(list(statuses)))
        .order_by(Run.id.desc()).limit(1))


def running_jobs(session: Session) -> list[Job]:
    """Jobs some worker holds now, oldest first."""
    return list(session.scalars(select(Job).where(Job.status == JobStatus.running.value).order_by(Job.id)))


def queue_depths(session: Session) -> dict[str, int]:
    """Jobs waiting in each queue."""
    statement = select(Job.queue, func.count()).where(Job.status == JobStatus.queued.value).group_by(Job.queue)
    return dict(session.execute(statement).all())


def get_cell(session: Session, run_id: int, cell_id: int) -> Result | None:
    """A run's cell by id (None when the id names another run's cell)."""
    cell = session.get(Result, cell_id)
    return cell if cell is not None and cell.run_id == run_id else None


def same_cell(session: Session, run_id: int, cell: Result) -> Result | None:
    """The cell of run ``run_id`` with ``cell``'s key (scenario, backend, device, dtype)."""
    return session.scalar(select(Result).where(Result.run_id == run_id,
                                               *(getattr(Result, f) == getattr(cell, f) for f in KEY_FIELDS)))
