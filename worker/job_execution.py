"""``run_job``'s work: check a job's cells in the warm runner and store them in batches.

Every delivery of a job first claims it in the database (``gradci.services.db.jobs.claim_job``): a
finished job ignores redeliveries, a job of a cancelled run is dropped, a second message of a job
another delivery is running is dropped, and a job whose worker died ``max_job_attempts`` times is
marked error with error cells — never a redelivery loop. A running job renews its lease from a
thread of its own, writes its cells through the keyed upsert (a redelivered job rewrites its rows
instead of adding to them), and looks at the run's cancel flag between cells (at most every
``CANCEL_POLL_S``, in the same transaction as a batch of results).

A job that stores a failing cell while other jobs of its run go on says so (``report_failure``): the
run's check run names the failure then, not at the end (``gradci.services.github.progress``).

The database may go away while a job runs: its cells stay buffered and the job goes on; closing
the job waits for the database (``FINISH_WAIT_S``) before the task gives up its delivery to
Celery's retry. A job whose lease lapsed meanwhile and that another delivery took over stops
without closing it.
"""
from __future__ import annotations

import dataclasses
import enum
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from celery.exceptions import SoftTimeLimitExceeded
from kombu.utils.functional import retry_over_time

from gradci.scenarios.authoring.project import ProjectError, load_project
from gradci.scenarios.contract.cell import FAILING
from gradci.scenarios.contract.devices import CPU
from gradci.services.db.availability import DATABASE_UNAVAILABLE
from gradci.services.db.cell_records import CellRecordsBuffer
from gradci.services.db.jobs import (
    Claim,
    cancel_requested,
    claim_job,
    finish_job,
    held_by,
    holds_job,
    lock_run,
    renew_lease,
    run_backends,
    stored_cell_keys,
    unfinished_jobs,
)
from gradci.services.db.models import Job, JobStatus, Run
from gradci.services.db.repository_options import measures_power
from gradci.services.db.results import upsert_results
from gradci.services.db.session import session_scope
from gradci.services.planner import job_cells
from gradci.worker.affected import DependencyBuffer
from gradci.worker.agreement_specs import agreement_spec
from gradci.worker.checkout import CheckoutError
from gradci.worker.context import WorkerContext
from gradci.worker.reference_carrying import JobReferences
from gradci.worker.runner import CellSpec, RunnerError
from gradci.worker.sources import RunRef, Source, load_source

log = logging.getLogger(__name__)

CANCEL_POLL_S = 0.5  # also how long finished cells wait at most before they are stored
BATCH_CELLS = 500
# How long storing a job's last cells waits for an unreachable database (checking them again would
# cost far more); past it the task raises, and Celery's retry takes over.
FINISH_WAIT_S = 120.0
SendFinalize = Callable[[int], None]
ReportFailure = Callable[[int], None]  # a run's id: a job stored a failing cell of it
T = TypeVar("T")


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


class Stop(enum.Enum):
    cancelled = "cancelled"  # the run was cancelled
    lost = "lost"  # the job's lease lapsed and another delivery took it over


def patiently(work: Callable[[], T], what: str) -> T:
    """``work()``, tried again while the database is unreachable, for up to ``FINISH_WAIT_S``."""
    def waiting(exc: Exception, intervals: Any, retries: int) -> float:
        log.warning("%s: the database is unreachable (%s); trying again", what, str(exc).splitlines()[0])
        return next(intervals)

    return retry_over_time(work, DATABASE_UNAVAILABLE, errback=waiting, interval_start=0.5, interval_step=1,
                           interval_max=5, timeout=FINISH_WAIT_S)


class ResultWriter:
    """Buffers cells, and stores them with a read of the cancel flag in one short transaction.

    Given the ``delivery`` that runs the job, it also notices when the job is no longer that delivery's.
    """

    def __init__(self, database: str, job: JobRef, delivery: str | None = None,
                 dependencies: DependencyBuffer | None = None) -> None:
        self.database, self.job, self.delivery = database, job, delivery
        self.pending: list[dict[str, Any]] = []
        self.last_poll = time.monotonic()
        self.written = 0
        self.failed = False  # a failing cell was stored since ``new_failures`` last looked
        self.rule_coverage = CellRecordsBuffer(job.run_id, f"job {job.id}")
        self.dependencies = dependencies  # None: the cells are stored without records (never carried)

    def add(self, cell: dict[str, Any]) -> None:
        cell = self.rule_coverage.take(cell)
        self.pending.append(self.dependencies.take(cell) if self.dependencies is not None else cell)

    def due(self) -> bool:
        return len(self.pending) >= BATCH_CELLS or time.monotonic() - self.last_poll >= CANCEL_POLL_S

    def flush_and_poll(self) -> Stop | None:
        """Store the buffered cells; return why the job must stop, if it must.

        While the database is unreachable the cells stay buffered and the job goes on.
        """
        self.last_poll = time.monotonic()
        try:
            with session_scope(self.database) as session:
                held = self._held(session)
                stored = self._store(session, held)
                cancelled = cancel_requested(session, self.job.run_id)
                lost = not held
        except DATABASE_UNAVAILABLE as exc:
            log.warning("job %s: %d cells wait for the database: %s", self.job.id, len(self.pending),
                        str(exc).splitlines()[0])
            return None
        self._stored(stored)
        return Stop.cancelled if cancelled else Stop.lost if lost else None

    def store(self) -> None:
        """Store the buffered cells, waiting for the database if it is away."""
        def store_once() -> None:
            with session_scope(self.database) as session:
                stored = self._store(session)
            self._stored(stored)

        patiently(store_once, f"storing the cells of job {self.job.id}")

    def finish(self, status: str, message: str | None = None) -> bool:
        """Store what is left and close the job; True when it was the run's last unfinished job.

        The run's row is locked before the cells are written: each insert takes a key-share lock on
        it (the foreign key), so two jobs that wrote first and then asked for the run's lock would
        wait for each other — a deadlock on PostgreSQL that loses the loser's last cells."""
        def finish_once() -> bool:
            with session_scope(self.database) as session:
                lock_run(session, self.job.run_id)
                stored = self._store(session)
                last = finish_job(session, self.job.id, status, message, delivery=self.delivery)
            self._stored(stored)
            return last

        return patiently(finish_once, f"finishing job {self.job.id}")

    def _held(self, session) -> bool:
        """Whether the job is still this delivery's (always, for a job run without one)."""
        return self.delivery is None or holds_job(session, self.job.id, self.delivery)

    def _store(self, session, held: bool | None = None) -> int:
        """Store the buffered cells, only while the job is this delivery's.

        ``held``: whether it is, where the caller has just read it. A worker cut off from the database past
        its lease (its host's link down) may come back after another delivery took the job over and stored
        its cells; its own, late, are dropped (the caller then stops), and the check is repeated in the
        statement that writes, should the takeover come in between.
        """
        if not self.pending:
            return 0
        if self.delivery is None:
            written = upsert_results(session, self.job.run_id, self.pending, job_id=self.job.id, provenance=True)
        elif not (self._held(session) if held is None else held):
            return 0
        else:
            written = upsert_results(session, self.job.run_id, self.pending, job_id=self.job.id,
                                     replace_only_if=held_by(self.job.id, self.delivery), provenance=True)
        self.rule_coverage.store(session)
        if self.dependencies is not None:
            self.dependencies.store(session)
        return written

    def new_failures(self) -> bool:
        """Whether a failing cell was stored since the last call."""
        failed, self.failed = self.failed, False
        return failed

    def _stored(self, count: int) -> None:
        """The transaction that stored the buffered cells committed: they are no longer pending."""
        self.written += count
        self.failed = self.failed or (count > 0 and any(cell.get("status") in FAILING for cell in self.pending))
        self.pending = []
        self.rule_coverage.committed()
        if self.dependencies is not None:
            self.dependencies.committed()


class LeaseKeeper:
    """Renews a running job's lease every ``interval_s`` from a thread of its own.

    So a cell computing for minutes is not mistaken for a dead worker. It stops with the job, or once
    the job is no longer its delivery's.
    """

    def __init__(self, database: str, job_id: int, delivery: str, interval_s: float) -> None:
        self.database, self.job_id, self.delivery, self.interval_s = database, job_id, delivery, interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._renew, name=f"gradci-lease-{job_id}", daemon=True)

    def __enter__(self) -> LeaseKeeper:
        self._thread.start()
        return self

    def __exit__(self, *_: Any) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _renew(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                with session_scope(self.database) as session:
                    if not renew_lease(session, self.job_id, self.delivery):
                        return
            except DATABASE_UNAVAILABLE as exc:  # renewed at the next interval, if it is back by then
                log.warning("job %s: lease not renewed: %s", self.job_id, str(exc).splitlines()[0])


def cell_spec(job: JobRef, source: Source | None, scenario: str, dtype: str, context: WorkerContext) -> CellSpec:
    backend: Mapping[str, Any] = source.backends.get(job.backend, {}) if source else {}
    info = source.by_name.get(scenario) if source else None
    return CellSpec(scenario=scenario, backend=job.backend, device=job.device, dtype=dtype,
                    operator=info.operator if info else "", framework=backend.get("framework", ""),
                    mode=backend.get("mode", ""), source=source.root if source else None,
                    repository=source.repository if source else None, trusted=source.trusted if source else True,
                    run_on=context.run_on(job.device), fingerprint=info.fingerprint if info else None)


def other_mode_backends(backend: str, run_backends: Sequence[str], known: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The run's backends of ``backend``'s framework in the other of forward and reverse mode.

    A scenario's cells are compared with theirs, as ``gradci check`` compares a scenario's cells.
    """
    own = known.get(backend, {})
    modes = {"forward": "reverse", "reverse": "forward"}
    if own.get("mode") not in modes:
        return []
    return [name for name in run_backends if known.get(name, {}).get("framework") == own.get("framework")
            and known.get(name, {}).get("mode") == modes[own["mode"]]]


# The engine's options a run may set (Run.options), each over gradci.toml's [check] key of that name.
ENGINE_OPTIONS = ("repeats", "timings")


def engine_options(source: Source, run: RunRef) -> dict[str, Any]:
    """The engine's options for a run's cells (``check_scenario``'s keyword arguments).

    The run's own (``POST /api/runs`` ``repeats``, ``timings``), else the repository's gradci.toml
    ``[check] repeats`` and ``timings``, as ``gradci check`` takes them.
    """
    options = {name: run.options[name] for name in ENGINE_OPTIONS if name in run.options}
    if source.root is None or len(options) == len(ENGINE_OPTIONS):
        return options
    try:
        project = load_project(source.root)
    except ProjectError:  # the runner, reading the same file, has said what is wrong with it
        return options
    found = {name: getattr(project, name) for name in ENGINE_OPTIONS if getattr(project, name) is not None}
    return {**found, **options}


def cells_of(job: JobRef, source: Source | None, run: RunRef) -> list[tuple[str, str]]:
    declared = {info.name: info.dtypes for info in source.scenarios} if source else {}
    dtypes = (source.requested(run.matrix) if source else run.matrix).dtypes
    return job_cells(job.scenarios, declared, dtypes)


def scenario_groups(cells: Sequence[tuple[str, str]]) -> list[tuple[int, list[tuple[str, str]]]]:
    """The (scenario, dtype) cells in runs of one scenario each, with the index of each run's first cell."""
    groups: list[tuple[int, list[tuple[str, str]]]] = []
    for index, cell in enumerate(cells):
        if groups and groups[-1][1][0][0] == cell[0]:
            groups[-1][1].append(cell)
        else:
            groups.append((index, [cell]))
    return groups


def error_cells(job: JobRef, source: Source | None, cells: Sequence[tuple[str, str]], message: str,
                context: WorkerContext) -> list[dict[str, Any]]:
    return [cell_spec(job, source, scenario, dtype, context).error_cell(message) for scenario, dtype in cells]


class JobExecution:
    def __init__(self, job_id: int, context: WorkerContext, worker_name: str, delivery: str,
                 send_finalize: SendFinalize, report_failure: ReportFailure | None = None) -> None:
        self.job_id, self.context, self.worker_name, self.delivery = job_id, context, worker_name, delivery
        self.send_finalize = send_finalize
        # Told when this job stored a failing cell while the run goes on: its check run shows it.
        self.report_failure = report_failure
        self.database = context.settings.database_url

    def __call__(self) -> None:
        settings = self.context.settings
        with session_scope(self.database) as session:
            claim, job = claim_job(session, self.job_id, worker=self.worker_name, delivery=self.delivery,
                                   max_attempts=settings.max_job_attempts, lease_s=settings.worker_online_s)
            if job is None:
                return
            stored_run = session.get(Run, job.run_id)
            assert stored_run is not None, "a job's run outlives it (ON DELETE CASCADE)"
            ref, run = JobRef.of(job), RunRef.of(stored_run)
            attempt = job.attempts
            backends = run_backends(session, job.run_id, job.device) if claim is Claim.run else []
            # A GPU job of a backend the run also checks on the cpu compares its results with the CPU's.
            agreement = (claim is Claim.run and job.device != CPU
                         and job.backend in run_backends(session, job.run_id, CPU))
            power = claim is Claim.run and measures_power(session, stored_run)
        log.info("job %s (run %s, %s on %s): %s, attempt %s", ref.id, ref.run_id, ref.backend, ref.device,
                 claim.value, attempt)
        if claim is Claim.run:
            with LeaseKeeper(self.database, ref.id, self.delivery, settings.worker_heartbeat_s):
                self.run(ref, run, backends, agreement, power)
        elif claim is Claim.gave_up:
            self.give_up(ref, run)
        elif claim is not Claim.duplicate:  # finished or cancelled: nothing to check, perhaps the run to finalise
            self.finalize_if_last(ref.run_id)

    def run(self, job: JobRef, run: RunRef, run_backends: list[str], agreement: bool = False,
            power: bool = False) -> None:
        runner = self.context.runner()
        try:
            source = load_source(run, self.context.checkouts(), runner)
        except (CheckoutError, RunnerError) as exc:
            self.fail(job, run, None, f"cannot load the scenarios: {exc}")
            return
        peers = other_mode_backends(job.backend, run_backends, source.backends)
        options = engine_options(source, run)
        if source.root is not None:  # a repository's own code: which of its derivative rules each cell ran
            options["rule_coverage"] = True
            if power:  # a default branch's push, its repository's option on: errors planted in its rules
                options["power"] = True
        cells = cells_of(job, source, run)
        # What each cell depended on, stamped with what the worker knows: the environment, the commit.
        dependencies = DependencyBuffer(source.root, source.sha, options, self.context.device_record())
        references = JobReferences(self.database, run, source, dependencies.environment, job.scenarios,
                                   keep=self.context.settings.keep_references)
        writer = ResultWriter(self.database, job, self.delivery, dependencies)
        status, message, index = JobStatus.done.value, None, 0
        try:
            # A scenario's dtypes in one request, as `gradci check` asks for them: one check of the
            # scenario per job instead of one per cell (the runner's timeout still holds per cell).
            for index, scenario_cells in scenario_groups(cells):  # noqa: B007 - read after the loop: where it stopped
                stop = writer.flush_and_poll() if writer.due() else None
                self._progress(job, writer)
                if stop is Stop.lost:
                    log.warning("job %s was taken over by another delivery: this one stops", job.id)
                    return
                if stop is Stop.cancelled:
                    status = JobStatus.cancelled.value
                    break
                specs = []
                for scenario, dtype in scenario_cells:
                    spec = cell_spec(job, source, scenario, dtype, self.context)
                    # The agreement cell's CPU side is computed in the same request: the cpu job owns the CPU cells.
                    specs += [spec, agreement_spec(spec)] if agreement else [spec]
                scenario = scenario_cells[0][0]
                for record in runner.run_cells(specs, peers=peers, options={**options, **references.options(scenario)}):
                    writer.add(record)
                writer.rule_coverage.add_rules(runner.last_rules)
                references.keep(scenario, runner.last_references)
        except SoftTimeLimitExceeded:
            status = JobStatus.error.value
            message = f"exceeded the soft time limit ({self.context.settings.job_soft_time_limit_s} s)"
            for cell in error_cells(job, source, cells[index:], message, self.context):
                writer.add(cell)
        if writer.finish(status, message):
            self.send_finalize(job.run_id)
        else:  # other jobs go on: what this one found is worth showing now
            self._progress(job, writer)

    def _progress(self, job: JobRef, writer: ResultWriter) -> None:
        if writer.new_failures() and self.report_failure is not None:
            self.report_failure(job.run_id)

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
        # A job claim_job closed already belongs to no delivery any more.
        writer = ResultWriter(self.database, job, None if status_already_set else self.delivery)
        for cell in error_cells(job, source, missing, message, self.context):
            writer.add(cell)
        if status_already_set:  # store the cells, then see about the run
            writer.store()
            self.finalize_if_last(job.run_id)
        elif writer.finish(JobStatus.error.value, message):
            self.send_finalize(job.run_id)

    def finalize_if_last(self, run_id: int) -> None:
        """Also heals a worker that died between finishing the last job and sending finalize_run."""
        with session_scope(self.database, readonly=True) as session:
            done = unfinished_jobs(session, run_id) == 0
        if done:
            self.send_finalize(run_id)
