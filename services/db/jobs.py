"""The workers' writes, and the reconciler's questions about lost jobs and runs.

The writes: storing a plan, claiming a job, finishing it, finalising the run. The questions: which
jobs and runs lost their message or their worker.

Reliability lives here, in the database, not in the broker: a job's attempts are counted when it
is claimed (so a job whose worker died is redelivered at most ``max_attempts`` times, then marked
error), a finished job ignores every later delivery, a running job belongs to the one delivery that
claimed it for as long as that delivery renews its lease (a second message of the same job is then
a duplicate and is dropped), and "was this the last job?" is answered under a lock on the run row so
that exactly one worker finalises. Locks are always taken run first, then job, as
``gradci.services.db.runs.request_cancel`` does, so they cannot deadlock.

Functions flush but never commit: the caller owns the transaction.
"""
from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import ColumnElement, and_, case, exists, func, or_, select, update
from sqlalchemy.orm import Session

from gradci.scenarios.contract.cell import COUNTED, FAILING, Status
from gradci.scenarios.contract.coverage import coverage_percent
from gradci.services.db.models import (
    FINISHED_RUN_STATUSES,
    FINISHED_RUN_VALUES,
    Job,
    JobStatus,
    Result,
    Run,
    RunStatus,
    ScenarioCatalogEntry,
    Worker,
    database_now,
    utcnow,
)
from gradci.services.db.queries import cell_counts
from gradci.services.db.runs import lock_run
from gradci.services.db.uploads import closed_unfinished, is_open, missing_at_close
from gradci.services.db.upsert import dialect_insert, rows_matched

UNFINISHED_JOB_STATUSES = (JobStatus.queued.value, JobStatus.running.value)
FINISHED_JOB_STATUSES = (JobStatus.done.value, JobStatus.error.value, JobStatus.cancelled.value)


class Claim(enum.Enum):
    run = "run"  # go ahead: the attempt is counted
    finished = "finished"  # already done, errored or cancelled: a stale delivery, drop it
    cancelled = "cancelled"  # the run was cancelled: the job is marked so, nothing runs
    gave_up = "gave_up"  # attempts exhausted: the job is marked error
    duplicate = "duplicate"  # another delivery runs the job and renews its lease: drop this one
    missing = "missing"  # no such job (its run was deleted)


def record_catalog(session: Session, run_id: int, scenarios: Iterable[Any]) -> None:
    """The scenarios a run's checkout declares, with their fingerprints and device requirements (idempotent)."""
    rows = [{"run_id": run_id, "name": s.name, "operator": s.operator, "fingerprint": s.fingerprint,
             "tags": list(s.tags), "requirements": s.requirements.to_dict(), "file": s.file, "line": s.line}
            for s in scenarios]
    if rows:
        insert = dialect_insert(session, ScenarioCatalogEntry.__table__)
        session.execute(insert.on_conflict_do_nothing(index_elements=["run_id", "name"]), rows)


def store_jobs(session: Session, run: Run, specs: Sequence[Any]) -> list[Job]:
    """The run's jobs (from ``gradci.services.planner.JobSpec``), and the run marked running."""
    jobs = [Job(run_id=run.id, backend=spec.backend, device=spec.device, queue=spec.queue,
                scenarios=list(spec.scenarios), status=JobStatus.queued.value, attempts=0) for spec in specs]
    session.add_all(jobs)
    mark_run_started(run)
    session.flush()
    return jobs


def run_backends(session: Session, run_id: int, device: str) -> list[str]:
    """The backends the run checks on ``device`` (its jobs' backends)."""
    query = select(Job.backend).where(Job.run_id == run_id, Job.device == device).distinct()
    return sorted(session.scalars(query))


def mark_run_started(run: Run) -> None:
    if run.status == RunStatus.queued.value:
        run.status = RunStatus.running.value
    run.started_at = run.started_at or utcnow()


def jobs_of_run(session: Session, run_id: int) -> list[Job]:
    return list(session.scalars(select(Job).where(Job.run_id == run_id).order_by(Job.id)))


def claim_job(session: Session, job_id: int, *, worker: str, delivery: str, max_attempts: int,
              lease_s: float) -> tuple[Claim, Job | None]:
    """Decide what ``delivery`` (a Celery task id) of ``job_id`` does, and record it.

    A running job is taken over only by its own delivery coming back (its pool process died, or it
    is retried after an outage) or when its holder stopped renewing the lease for ``lease_s``: two
    messages of one job delivered at once run it once."""
    run_id = session.scalar(select(Job.run_id).where(Job.id == job_id))
    run = lock_run(session, run_id) if run_id is not None else None
    job = session.scalars(select(Job).where(Job.id == job_id).with_for_update()).one_or_none()
    if run is None or job is None:
        return Claim.missing, None
    if job.status in FINISHED_JOB_STATUSES:
        return Claim.finished, job
    now = database_now(session)  # the lease is the database's, whatever this host's clock says
    if run.cancel_requested or run.status in FINISHED_RUN_STATUSES:
        job.status, job.finished_at = JobStatus.cancelled.value, now
        return Claim.cancelled, job
    if (job.status == JobStatus.running.value and job.delivery != delivery
            and job.lease_renewed_at is not None and job.lease_renewed_at >= now - timedelta(seconds=lease_s)):
        return Claim.duplicate, job
    if job.attempts >= max_attempts:
        job.status, job.finished_at = JobStatus.error.value, now
        job.message = (f"gave up after {job.attempts} attempts: the worker running it died or ran out of time "
                       f"each time")
        return Claim.gave_up, job
    job.attempts += 1
    job.status, job.worker, job.started_at, job.finished_at = JobStatus.running.value, worker, now, None
    job.delivery, job.lease_renewed_at = delivery, now
    job.device_record = heartbeat_device_record(session, worker)
    mark_run_started(run)
    return Claim.run, job


def heartbeat_device_record(session: Session, worker: str) -> dict[str, Any] | None:
    """The device record ``worker`` last sent with its heartbeat: what its cells are computed on.

    A worker beats once before it takes its first job. None for a worker that never beat.
    """
    versions = session.scalar(select(Worker.versions).where(Worker.name == worker))
    return (versions or {}).get("device")


def renew_lease(session: Session, job_id: int, delivery: str) -> bool:
    """Keep ``delivery``'s hold on its running job.

    False once the job is no longer its own (finished, or sent again after the lease lapsed).
    """
    result = session.execute(update(Job).where(Job.id == job_id, Job.delivery == delivery,
                                               Job.status == JobStatus.running.value)
                             .values(lease_renewed_at=database_now(session))
                             .execution_options(synchronize_session=False))
    return rows_matched(result) == 1


def held_by(job_id: int, delivery: str) -> ColumnElement[bool]:
    """That ``delivery`` holds the job it runs, as a condition of the statement that writes for it."""
    return exists().where(Job.id == job_id, Job.delivery == delivery, Job.status == JobStatus.running.value)


def holds_job(session: Session, job_id: int, delivery: str) -> bool:
    """Whether ``delivery`` still holds the job it runs."""
    return bool(session.scalar(select(held_by(job_id, delivery))))


def cancel_requested(session: Session, run_id: int) -> bool:
    return bool(session.scalar(select(Run.cancel_requested).where(Run.id == run_id)))


def stored_cell_keys(session: Session, run_id: int, scenarios: Sequence[str], backend: str,
                     device: str) -> set[tuple[str, str]]:
    """(scenario, dtype) of the cells of these scenarios already stored for ``backend`` × ``device``."""
    statement = select(Result.scenario, Result.dtype).where(
        Result.run_id == run_id, Result.backend == backend, Result.device == device,
        Result.scenario.in_(list(scenarios)),
    )
    return {(scenario, dtype) for scenario, dtype in session.execute(statement)}


def finish_job(session: Session, job_id: int, status: str, message: str | None = None,
               delivery: str | None = None) -> bool:
    """Mark the job finished; True when no job of its run is left unfinished.

    The caller then finalises. Under the run's lock, so that of two jobs finishing at once exactly one
    sees zero; a caller that writes cells in the same transaction locks the run first (one lock order).
    With ``delivery``, only while that delivery still holds the job: one taken over after its lease
    lapsed is finished by the delivery that took it over.
    """
    job = session.get(Job, job_id)
    if job is None:
        return False
    lock_run(session, job.run_id)
    session.refresh(job, with_for_update=True)
    if delivery is not None and job.delivery != delivery:
        return False
    job.status, job.finished_at = status, utcnow()
    if message is not None:
        job.message = message[:2000]
    session.flush()
    return unfinished_jobs(session, job.run_id) == 0


def unfinished_jobs(session: Session, run_id: int) -> int:
    return int(session.scalar(
        select(func.count()).select_from(Job).where(Job.run_id == run_id, Job.status.in_(UNFINISHED_JOB_STATUSES))
    ) or 0)


def finish_run(session: Session, run_id: int) -> Run | None:
    """Close a run whose jobs are all done: its counts, coverage and final status.

    Idempotent; for an upload run, only once it closed. Returns the run when it is (now) finished, None
    when jobs are still running, shards still awaited, or the run is unknown.
    """
    run = lock_run(session, run_id)
    if run is None or unfinished_jobs(session, run_id) or is_open(session, run_id):
        return None
    counts = cell_counts(session, [run_id])[run_id]
    run.coverage = coverage_percent(counts)
    if run.status not in FINISHED_RUN_STATUSES:
        run.status, message = final_status(session, run, counts)
        run.error_message = run.error_message or message
    run.finished_at = run.finished_at or utcnow()
    session.flush()
    return run


def final_status(session: Session, run: Run, counts: dict[str, int]) -> tuple[str, str | None]:
    """The run's final status and its message: cancelled, error, failed or passed, in that precedence.

    Error when a job gave up, or an expected upload shard never came: the run is incomplete.
    """
    if run.cancel_requested:
        return RunStatus.cancelled.value, None
    missing = missing_at_close(session, run.id)
    if missing:
        return RunStatus.error.value, (f"shard(s) {', '.join(missing)} not uploaded within GRADCI_UPLOAD_WAIT "
                                       f"of the first upload; the run has the other shards' cells")
    failed_jobs = list(session.scalars(
        select(Job).where(Job.run_id == run.id, Job.status == JobStatus.error.value).order_by(Job.id)
    ))
    if failed_jobs:
        first = failed_jobs[0]
        return RunStatus.error.value, (f"{len(failed_jobs)} job(s) failed; job {first.id} "
                                       f"({first.backend} on {first.device}): {first.message}")
    if any(counts.get(status, 0) for status in FAILING):
        return RunStatus.failed.value, None
    if not any(counts.get(status, 0) for status in COUNTED):  # nothing that did not run reads as a pass
        return RunStatus.skipped.value, nothing_checked(session, run.id, counts)
    return RunStatus.passed.value, None


def nothing_checked(session: Session, run_id: int, counts: dict[str, int]) -> str:
    """Why a run checked nothing: its cells' most common skip reason."""
    total = sum(counts.values())
    if not total:
        return "the run has no cells"
    reason, count = session.execute(
        select(Result.message, func.count()).where(Result.run_id == run_id, Result.status == Status.SKIP.value)
        .group_by(Result.message).order_by(func.count().desc()).limit(1)).one_or_none() or ("", 0)
    return f"every cell was skipped ({total}); the most common reason ({count}): {reason or 'none given'}"


def runs_reporting_against(session: Session, run: Run) -> list[int]:
    """Runs of the same repository whose base commit ``run`` checked: their reports compare with it."""
    if run.repository_id is None or not run.head_sha:
        return []
    return list(session.scalars(select(Run.id).where(
        Run.repository_id == run.repository_id, Run.base_sha == run.head_sha, Run.id != run.id)))


# --- the reconciler's questions: what the database owes that the broker may have lost --------------


def _lost(cutoff: datetime) -> ColumnElement[bool]:
    """A running job nobody runs any more.

    Its delivery stopped renewing the lease, or the worker that claimed it stopped beating (it died
    whole, pool and all).
    """
    alive = select(Worker.name).where(Worker.last_heartbeat >= cutoff)
    return and_(Job.status == JobStatus.running.value, or_(
        func.coalesce(Job.lease_renewed_at, Job.started_at) < cutoff,
        and_(Job.started_at < cutoff, or_(Job.worker.is_(None), Job.worker.not_in(alive))),
    ))


def lost_jobs(session: Session, *, lease_s: float, limit: int) -> list[tuple[int, str]]:
    """(id, queue) of running jobs whose holder is gone.

    A broker may never redeliver them (the embedded transport keeps no unacknowledged copy; Redis only
    after the visibility timeout, and nothing at all when it restarted, or when the holder gave the job
    up after its retries).
    """
    cutoff = database_now(session) - timedelta(seconds=lease_s)
    return [(job_id, queue) for job_id, queue in session.execute(
        select(Job.id, Job.queue).where(_lost(cutoff)).order_by(Job.id).limit(limit))]


def requeue_lost(session: Session, job_id: int, *, lease_s: float) -> bool:
    """Put a lost job back in the queue; True for the one caller whose update won.

    So only that caller sends the job again. Its attempt stays counted: the next claim counts the next
    one.
    """
    cutoff = database_now(session) - timedelta(seconds=lease_s)
    result = session.execute(update(Job).where(Job.id == job_id, _lost(cutoff)).values(
        status=JobStatus.queued.value, worker=None, delivery=None, queued_at=utcnow())
        .execution_options(synchronize_session=False))
    return rows_matched(result) == 1


def _active_run() -> ColumnElement[bool]:
    return and_(Run.cancel_requested.is_(False), Run.status.not_in(FINISHED_RUN_VALUES))


def stranded_jobs(session: Session, *, grace_s: float, limit: int) -> list[tuple[int, str]]:
    """(id, queue) of jobs of active runs queued for longer than ``grace_s`` since they were last sent."""
    cutoff = utcnow() - timedelta(seconds=grace_s)
    return [(job_id, queue) for job_id, queue in session.execute(
        select(Job.id, Job.queue).join(Run, Run.id == Job.run_id)
        .where(Job.status == JobStatus.queued.value, Job.queued_at < cutoff, _active_run())
        .order_by(Job.id).limit(limit))]


def mark_resent(session: Session, job_id: int, *, grace_s: float) -> bool:
    """Restart a stranded job's grace; True for the one caller whose update won (it sends the job)."""
    cutoff = utcnow() - timedelta(seconds=grace_s)
    result = session.execute(update(Job).where(Job.id == job_id, Job.status == JobStatus.queued.value,
                                               Job.queued_at < cutoff).values(queued_at=utcnow())
                             .execution_options(synchronize_session=False))
    return rows_matched(result) == 1


def unplanned_runs(session: Session, *, grace_s: float, limit: int) -> list[int]:
    """Runs queued for longer than ``grace_s`` with no job stored: their plan is owed."""
    cutoff = utcnow() - timedelta(seconds=grace_s)
    return list(session.scalars(select(Run.id).where(
        Run.status == RunStatus.queued.value, Run.cancel_requested.is_(False), Run.created_at < cutoff,
        ~exists().where(Job.run_id == Run.id)).order_by(Run.id).limit(limit)))


def unfinalized_runs(session: Session, *, grace_s: float, limit: int) -> list[int]:
    """The runs whose finalisation is owed.

    Unfinished runs whose every job finished more than ``grace_s`` ago, and upload runs closed that long
    ago.
    """
    cutoff = utcnow() - timedelta(seconds=grace_s)
    unfinished = func.sum(case((Job.status.in_(UNFINISHED_JOB_STATUSES), 1), else_=0))
    of_jobs = session.scalars(
        select(Run.id).join(Job, Job.run_id == Run.id)
        .where(Run.status.not_in(FINISHED_RUN_VALUES))
        .group_by(Run.id).having(unfinished == 0, func.max(Job.finished_at) < cutoff)
        .order_by(Run.id).limit(limit))
    return sorted({*of_jobs, *closed_unfinished(session, closed_before=cutoff, limit=limit)})[:limit]
