"""Creating, cancelling and rerunning runs: the writes the API and the webhook handler share.

Functions flush but never commit: the caller owns the transaction.
"""
from __future__ import annotations

from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session, lazyload

from gradci.scenarios.contract.cell import FAILING
from gradci.scenarios.contract.devices import checked_devices
from gradci.scenarios.contract.matrix import Matrix, exact_pattern
from gradci.services.db.models import (
    FINISHED_RUN_STATUSES,
    Job,
    JobStatus,
    Repository,
    Run,
    RunStatus,
    Trigger,
    utcnow,
)
from gradci.services.db.queries import unsuccessful_cells
from gradci.services.db.upsert import dialect_insert
from gradci.services.repo_urls import without_credentials


def lock_for_transaction(session: Session, key: str) -> None:
    """Serialise the transactions that take the same ``key`` until they end.

    So a check-then-create (is there a base run? an active run of this pull request?) is not raced by a
    concurrent one. PostgreSQL: an advisory lock; SQLite already lets one writer in at a time.
    """
    if session.get_bind().dialect.name == "postgresql":
        session.execute(select(func.pg_advisory_xact_lock(func.hashtext(key))))


def lock_run(session: Session, run_id: int) -> Run | None:
    """The run, locked until the transaction ends (PostgreSQL; SQLite's writes are serialised anyway)."""
    # lazyload: the repository is joined by default, and PostgreSQL cannot lock across an outer join.
    statement = select(Run).options(lazyload(Run.repository)).where(Run.id == run_id).with_for_update()
    return session.scalars(statement).one_or_none()


def get_or_create_repository(session: Session, url: str, full_name: str | None = None) -> Repository:
    """The repository at ``url``, inserted when it is new.

    Safe under concurrency: two requests for a new repository insert it once. A known repository (nearly
    every call) costs one query. The URL is stored without credentials, whoever passes it.
    """
    url = without_credentials(url)
    by_url = select(Repository).where(Repository.url == url)
    repository = session.scalars(by_url).one_or_none()
    if repository is None:
        insert = dialect_insert(session, Repository.__table__)
        session.execute(
            insert.values(url=url, full_name=full_name, created_at=utcnow()).on_conflict_do_nothing(
                index_elements=["url"]
            )
        )
        repository = session.scalars(by_url).one()
    if full_name and not repository.full_name:
        repository.full_name = full_name
    return repository


def create_run(
    session: Session,
    *,
    repository: Repository | None = None,
    head_sha: str | None = None,
    base_sha: str | None = None,
    ref: str | None = None,
    pr_number: int | None = None,
    matrix: Matrix = Matrix(),
    trigger: str = Trigger.api.value,
    parent_run_id: int | None = None,
    options: dict[str, Any] | None = None,
) -> Run:
    """A queued run (``repository=None``: the built-in library).

    The caller commits, then dispatches ``plan_run`` — never before the commit, or the worker may not
    see the row.
    """
    run = Run(
        repository=repository,
        head_sha=head_sha,
        base_sha=base_sha,
        ref=ref,
        pr_number=pr_number,
        matrix=matrix.to_mapping(),
        trigger=Trigger(trigger).value,
        parent_run_id=parent_run_id,
        options=options or {},
        status=RunStatus.queued.value,
        cancel_requested=False,
    )
    session.add(run)
    session.flush()
    return run


class RunAlreadyFinished(Exception):
    def __init__(self, run: Run) -> None:
        super().__init__(f"run {run.id} already finished ({run.status})")


def request_cancel(session: Session, run: Run) -> Run:
    """Cancel a run cooperatively.

    Queued jobs are dropped now; running jobs see ``cancel_requested`` and stop at their next cell, and
    the last of them to stop finishes the run. Cancelling a cancelled run is a no-op; cancelling one
    that passed or failed raises ``RunAlreadyFinished``.
    """
    if run.status == RunStatus.cancelled:
        return run
    if run.status in FINISHED_RUN_STATUSES:
        raise RunAlreadyFinished(run)
    now = utcnow()
    run.cancel_requested = True
    session.execute(
        update(Job)
        .where(Job.run_id == run.id, Job.status == JobStatus.queued.value)
        .values(status=JobStatus.cancelled.value, finished_at=now)
    )
    still_running = session.scalar(
        select(Job.id).where(Job.run_id == run.id, Job.status == JobStatus.running.value).limit(1)
    )
    if still_running is None:
        run.status = RunStatus.cancelled.value
        run.finished_at = now
    session.flush()
    return run


def rerun_matrix(session: Session, run: Run) -> Matrix | None:
    """The matrix of a rerun of ``run``'s failed, errored and unexpectedly passing cells.

    None when it has none. Axes are independent, so the new run may re-check a few more cells than
    failed (a scenario that failed only in float32 is run in every failing dtype).
    """
    cells = unsuccessful_cells(session, run.id, sorted(FAILING))
    if not cells:
        return None
    axes = [sorted({cell[axis] for cell in cells}) for axis in range(4)]
    scenarios, backends, devices, dtypes = axes
    devices = sorted({checked for device in devices for checked in checked_devices(device)})
    return Matrix.of(backends=backends, devices=devices, dtypes=dtypes,
                     scenarios=[exact_pattern(name) for name in scenarios])


def create_rerun(session: Session, run: Run, matrix: Matrix | None = None) -> Run | None:
    """A new run of the same commit over ``matrix``, or None when nothing failed.

    ``matrix`` None: ``rerun_matrix(run)``, its failed cells.
    """
    matrix = matrix if matrix is not None else rerun_matrix(session, run)
    if matrix is None:
        return None
    return create_run(
        session,
        repository=run.repository,
        head_sha=run.head_sha,
        base_sha=run.base_sha,
        ref=run.ref,
        pr_number=run.pr_number,
        matrix=matrix,
        trigger=Trigger.rerun.value,
        parent_run_id=run.id,
        options=run.options,
    )


def mark_run_error(session: Session, run: Run, message: str) -> None:
    run.status = RunStatus.error.value
    run.error_message = message
    run.finished_at = utcnow()
    session.flush()
