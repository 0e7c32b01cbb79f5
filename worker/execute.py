"""``run_job``'s work: check a job's cells in the warm runner and store them in batches.

Every delivery of a job first claims it in the database (``services.db.jobs.claim_job``): a
finished job ignores redeliveries, a job of a cancelled run is dropped, and a job whose worker
died ``max_job_attempts`` times is marked error with error cells — never a redelivery loop. A
running job writes its cells through the keyed upsert, so a redelivered job rewrites its rows
instead of adding to them, and looks at the run's cancel flag between cells (at most every
``CANCEL_POLL_S``, in the same transaction as a batch of results).
"""
from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

from celery.exceptions import SoftTimeLimitExceeded

from services.db.jobs import (Claim, cancel_requested, claim_job, finish_job, lock_run, stored_cell_keys,
                              unfinished_jobs)
from services.db.models import Job, JobStatus, Run
from services.db.results import upsert_results
from services.db.session import session_scope
from services.planner import job_cells
from worker.checkout import CheckoutError
from worker.context import WorkerContext
from worker.runner import CellSpec, RunnerError
from worker.sources import RunRef, Source, load_source

log = logging.getLogger(__name__)

CANCEL_POLL_S = 0.5  # also how long finished cells wait at most before they are stored
BATCH_CELLS = 500
SendFinalize = Callable[[int], None]


@dataclasses.dataclass(frozen=True)
class JobRef:
    id: int
    run_id: int
    backend: str
    device: str
    scenarios: tuple[str, ...]

    @classmethod
    def of(cls, job: Job) -> JobRef:
        return cls(job.id, job.run_id, job.backend, job.device, tuple(job.scenarios or ()))


class ResultWriter:
    """Buffers cells; stores them, and reads the cancel flag, in one short transaction."""

    def __init__(self, database: str, job: JobRef) -> None:
        self.database, self.job = database, job
        self.pending: list[dict[str, Any]] = []
        self.last_poll = time.monotonic()
        self.written = 0

    def add(self, cell: dict[str, Any]) -> None:
        self.pending.append(cell)

    def due(self) -> bool:
        return len(self.pending) >= BATCH_CELLS or time.monotonic() - self.last_poll >= CANCEL_POLL_S

    def flush_and_poll(self) -> bool:
        """Store the buffered cells; True when the run has been cancelled."""
        with session_scope(self.database) as session:
            self._store(session)
            cancelled = cancel_requested(session, self.job.run_id)
        self.last_poll = time.monotonic()
        return cancelled

    def finish(self, status: str, message: str | None = None) -> bool:
        """Store what is left and close the job; True when it was the run's last unfinished job.

        The run's row is locked before the cells are written: each insert takes a key-share lock on
        it (the foreign key), so two jobs that wrote first and then asked for the run's lock would
        wait for each other — a deadlock on PostgreSQL that loses the loser's last cells."""
        with session_scope(self.database) as session:
            lock_run(session, self.job.run_id)
            self._store(session)
            return finish_job(session, self.job.id, status, message)

    def _store(self, session) -> None:  # type: ignore[no-untyped-def]
        if self.pending:
            self.written += upsert_results(session, self.job.run_id, self.pending, job_id=self.job.id)
            self.pending = []


def cell_spec(job: JobRef, source: Source | None, scenario: str, dtype: str, context: WorkerContext) -> CellSpec:
    backend = source.backends.get(job.backend, {}) if source else {}
    info = source.by_name.get(scenario) if source else None
    return CellSpec(scenario=scenario, backend=job.backend, device=job.device, dtype=dtype,
                    operator=info.operator if info else "", framework=backend.get("framework", ""),
                    mode=backend.get("mode", ""), source=source.root if source else None,
                    run_on=context.run_on(job.device), fingerprint=info.fingerprint if info else None)


def cells_of(job: JobRef, source: Source | None, run: RunRef) -> list[tuple[str, str]]:
    declared = {info.name: info.dtypes for info in source.scenarios} if source else {}
    dtypes = (source.requested(run.matrix) if source else run.matrix).dtypes
    return job_cells(job.scenarios, declared, dtypes)


def error_cells(job: JobRef, source: Source | None, cells: Sequence[tuple[str, str]], message: str,
                context: WorkerContext) -> list[dict[str, Any]]:
    return [cell_spec(job, source, scenario, dtype, context).error_cell(message) for scenario, dtype in cells]


class JobExecution:
    def __init__(self, job_id: int, context: WorkerContext, worker_name: str, send_finalize: SendFinalize) -> None:
        self.job_id, self.context, self.worker_name = job_id, context, worker_name
        self.send_finalize = send_finalize
        self.database = context.settings.database_url

    def __call__(self) -> None:
        with session_scope(self.database) as session:
            claim, job = claim_job(session, self.job_id, worker=self.worker_name,
                                   max_attempts=self.context.settings.max_job_attempts)
            if job is None:
                return
            ref, run = JobRef.of(job), RunRef.of(session.get(Run, job.run_id))
            attempt = job.attempts
        log.info("job %s (run %s, %s on %s): %s, attempt %s", ref.id, ref.run_id, ref.backend, ref.device,
                 claim.value, attempt)
        if claim is Claim.run:
            self.run(ref, run)
        elif claim is Claim.gave_up:
            self.give_up(ref, run)
        else:  # finished or cancelled: no cell to check, but perhaps the run to finalise
            self.finalize_if_last(ref.run_id)

    def run(self, job: JobRef, run: RunRef) -> None:
        runner = self.context.runner()
        try:
            source = load_source(run, self.context.checkouts(), runner)
        except (CheckoutError, RunnerError) as exc:
            self.fail(job, run, None, f"cannot load the scenarios: {exc}")
            return
        cells = cells_of(job, source, run)
        writer = ResultWriter(self.database, job)
        status, message, index = JobStatus.done.value, None, 0
        try:
            for index, (scenario, dtype) in enumerate(cells):
                if writer.due() and writer.flush_and_poll():
                    status = JobStatus.cancelled.value
                    break
                writer.add(runner.run_cell(cell_spec(job, source, scenario, dtype, self.context)))
        except SoftTimeLimitExceeded:
            status = JobStatus.error.value
            message = f"exceeded the soft time limit ({self.context.settings.job_soft_time_limit_s} s)"
            for cell in error_cells(job, source, cells[index:], message, self.context):
                writer.add(cell)
        if writer.finish(status, message):
            self.send_finalize(job.run_id)

    def give_up(self, job: JobRef, run: RunRef) -> None:
        """Attempts exhausted: the job's cells that no attempt stored become error cells."""
        try:
            source = load_source(run, self.context.checkouts(), self.context.runner())
        except (CheckoutError, RunnerError):
            source = None
        self.fail(job, run, source, "the job gave up after its worker died or ran out of time "
                                    f"{self.context.settings.max_job_attempts} times", status_already_set=True)

    def fail(self, job: JobRef, run: RunRef, source: Source | None, message: str,
             status_already_set: bool = False) -> None:
        with session_scope(self.database) as session:
            stored = stored_cell_keys(session, job.run_id, job.scenarios, job.backend, job.device)
        missing = [cell for cell in cells_of(job, source, run) if cell not in stored]
        writer = ResultWriter(self.database, job)
        for cell in error_cells(job, source, missing, message, self.context):
            writer.add(cell)
        if status_already_set:  # claim_job closed the job; store the cells, then see about the run
            writer.flush_and_poll()
            self.finalize_if_last(job.run_id)
        elif writer.finish(JobStatus.error.value, message):
            self.send_finalize(job.run_id)

    def finalize_if_last(self, run_id: int) -> None:
        """Also heals a worker that died between finishing the last job and sending finalize_run."""
        with session_scope(self.database, readonly=True) as session:
            done = unfinished_jobs(session, run_id) == 0
        if done:
            self.send_finalize(run_id)
