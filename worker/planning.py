"""``plan_run``'s work: from a queued run to stored jobs on their device queues.

Idempotent: a redelivered plan finds the run's jobs already stored and only re-sends those still
waiting (a duplicate message is harmless: ``claim_job`` drops deliveries of finished jobs).
A run that cannot be planned — unknown commit, broken gradci.toml, scenario module that fails to
import, no matching scenario — ends as ``error`` with the reason as its message.
"""
from __future__ import annotations

import logging
from collections.abc import Callable

from scenarios.devices import CPU, CUDA
from scenarios.project import ProjectError, read_config
from services import planner
from services.db.jobs import jobs_of_run, lock_run, record_catalog, store_jobs
from services.db.models import FINISHED_RUN_STATUSES, JobStatus, Run
from services.db.runs import mark_run_error
from services.db.session import session_scope
from services.db.workers import online_counts_by_device
from worker.checkout import CheckoutError
from worker.context import WorkerContext
from worker.runner import RunnerError
from worker.sources import RunRef, Source, load_source

log = logging.getLogger(__name__)

SendJob = Callable[[int, str], None]  # (job id, queue)


def default_devices(online: dict[str, int]) -> list[str]:
    """Without a devices axis: the CPU, plus "cuda" when a GPU worker is online."""
    return [CPU] + ([CUDA] if any(device.startswith(CUDA) for device in online) else [])


def plan(run_id: int, context: WorkerContext, send_job: SendJob) -> None:
    database = context.settings.database_url
    with session_scope(database) as session:
        run = session.get(Run, run_id)
        if run is None:
            log.warning("plan_run: run %s does not exist", run_id)
            return
        if run.status in FINISHED_RUN_STATUSES or run.cancel_requested:
            return
        jobs = jobs_of_run(session, run_id)
        waiting = [(job.id, job.queue) for job in jobs if job.status == JobStatus.queued.value]
        ref = RunRef.of(run)
        online = online_counts_by_device(session, within_s=context.settings.worker_online_s)
    if jobs:
        _send_all(waiting, send_job)
        return
    try:
        source = load_source(ref, context.checkouts(), context.runner())
        if not source.requested(ref.matrix).backends:
            # "Every available backend": only now pay for importing every framework to find them.
            source = load_source(ref, context.checkouts(), context.runner(), availability=True)
        the_plan = planner.plan_run(
            source.scenarios, run_matrix=ref.matrix, file_matrix=source.file_matrix,
            available_backends=source.available_backends, known_backends=list(source.backends),
            default_devices=default_devices(online), chunk_size=context.settings.job_chunk_size,
        )
    except (CheckoutError, RunnerError, planner.PlanError) as exc:
        _fail(database, run_id, str(exc))
        return
    except Exception as exc:  # a bug or an outage: the run must still end, with the reason
        log.exception("plan_run %s failed", run_id)
        _fail(database, run_id, f"planning failed: {type(exc).__name__}: {exc}")
        return
    _send_all(_store(database, run_id, source, the_plan), send_job)


def _store(database: str, run_id: int, source: Source, the_plan: planner.Plan) -> list[tuple[int, str]]:
    with session_scope(database) as session:
        run = lock_run(session, run_id)
        # Cancelled while we planned, or planned by a concurrent delivery: nothing to add.
        if run is None or run.cancel_requested or run.status in FINISHED_RUN_STATUSES or jobs_of_run(session, run_id):
            return []
        if source.sha and run.head_sha != source.sha:
            run.head_sha = source.sha  # a ref resolved now: every job checks this exact commit
        record_catalog(session, run_id, source.scenarios)
        run.config = repository_config(source.root)
        jobs = store_jobs(session, run, the_plan.jobs)
        log.info("run %s: %d cells in %d jobs", run_id, the_plan.cell_count, len(jobs))
        return [(job.id, job.queue) for job in jobs]


def repository_config(root: str | None) -> dict:
    """The checkout's gradci.toml as data (report targets live there); plain TOML, no code runs."""
    if root is None:
        return {}
    try:
        return read_config(root)
    except ProjectError:
        return {}  # the runner already refused a broken file; nothing more to keep


def _fail(database: str, run_id: int, message: str) -> None:
    log.warning("run %s cannot be planned: %s", run_id, message)
    with session_scope(database) as session:
        run = lock_run(session, run_id)
        if run is not None and run.status not in FINISHED_RUN_STATUSES:
            mark_run_error(session, run, message[:2000])


def _send_all(jobs: list[tuple[int, str]], send_job: SendJob) -> None:
    for job_id, queue in jobs:
        send_job(job_id, queue)
