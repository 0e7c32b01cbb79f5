"""``plan_run``'s work: from a queued run to stored jobs on their device queues.

Idempotent: a redelivered plan finds the run's jobs already stored and only re-sends those still
waiting (a duplicate message is harmless: ``claim_job`` drops deliveries of finished jobs).
A run that cannot be planned — unknown commit, broken gradci.toml, scenario module that fails to
import, no matching scenario, no cell that any device could run — ends as ``error`` with the reason
as its message.

GPU jobs are routed by the scenarios' requirements over the GPUs the workers table knows
(``gradci.services.planner.route``); cells no device of the run could ever run are stored as ``skip`` with
the reason when the jobs are. A plan delivered again for a run whose jobs exist ends the wait of
those that waited for a device longer than GRADCI_DEVICE_WAIT (the reconciler sends it): their
cells are stored as ``skip`` with the reason they waited, and the job is done.

Before the jobs are stored, the cells a base run's results stand for are carried
(``gradci.worker.carrying``): stored with their provenance in the same transaction, and left out of
the jobs. A run whose every cell is carried has no job: it stays queued until finalize_run closes it.
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from sqlalchemy.orm import Session

from gradci.scenarios.authoring.project import ProjectError, read_config
from gradci.scenarios.contract.cell import Cell, Status
from gradci.scenarios.contract.devices import CPU, CUDA
from gradci.scenarios.contract.matrix import Matrix
from gradci.services import planner
from gradci.services.db.availability import DATABASE_UNAVAILABLE
from gradci.services.db.carried_references import scenarios_with_references
from gradci.services.db.cell_costs import last_timed_run, scenario_costs
from gradci.services.db.cell_risk import cells_reaching, failing_cells, rule_methods
from gradci.services.db.jobs import finish_job, jobs_of_run, lock_run, record_catalog, store_jobs
from gradci.services.db.models import FINISHED_RUN_STATUSES, JobStatus, Run, utcnow
from gradci.services.db.results import upsert_results
from gradci.services.db.rules import record_rules
from gradci.services.db.runs import mark_run_error
from gradci.services.db.session import session_scope
from gradci.services.db.waiting import WaitingJob, claim_overdue, waiting_jobs
from gradci.services.db.workers import gpu_workers, online_counts_by_device, online_slots
from gradci.services.job_balance import Costs, Risk, changed_rules
from gradci.worker import carrying
from gradci.worker.checkout import CheckoutError
from gradci.worker.context import WorkerContext
from gradci.worker.job_execution import engine_options
from gradci.worker.reference_carrying import offered_references
from gradci.worker.runner import RunnerError
from gradci.worker.sources import RunRef, Source, load_source

log = logging.getLogger(__name__)

SendJob = Callable[[int, str], None]  # (job id, queue)
SendFinalize = Callable[[int], None]
# Runs a stored job in this process, now; False when it cannot (not this worker's kind of job).
RunHere = Callable[[int, str], bool]  # (job id, queue)


def default_devices(online: dict[str, int]) -> list[str]:
    """Without a devices axis: the CPU, plus "cuda" when a GPU worker is online."""
    return [CPU] + ([CUDA] if any(device.startswith(CUDA) for device in online) else [])


def plan_jobs(run_id: int, context: WorkerContext, send_job: SendJob,
              send_finalize: SendFinalize | None = None, run_here: RunHere | None = None) -> None:
    """Without ``send_finalize``, a run whose last job's wait ended here is finalised by the reconciler.

    With ``run_here``, a plan of one job runs it in this process (``run_alone``) instead of sending it.
    """
    settings = context.settings
    database = settings.database_url
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
        if jobs:  # planned already: only the jobs waiting for a device too long are this delivery's business
            overdue = waiting_jobs(session, within_s=settings.worker_online_s, run_ids=[run_id],
                                   waited_s=settings.device_wait)
        else:  # the workers the plan's devices and routing follow
            online = online_counts_by_device(session, within_s=settings.worker_online_s)
            gpus = gpu_workers(session, within_s=settings.worker_online_s)
            slots = online_slots(session, within_s=settings.worker_online_s)
            earlier = last_timed_run(session, run)  # whose cells' timings weigh the jobs, and say which may fail
            costs = _costs(session, earlier, ref, slots) if settings.job_balance and earlier is not None else None
    if jobs:
        ended = _end_waits(ref, overdue, context, send_finalize) if overdue else set()
        _send_all([(job_id, queue) for job_id, queue in waiting if job_id not in ended], send_job)
        return
    if _carried_whole(ref, context, send_finalize):
        return
    try:
        source = load_source(ref, context.checkouts(), context.runner(), rules=True)
        if not source.requested(ref.matrix).backends:
            # "Every available backend": only now pay for importing every framework to find them.
            source = load_source(ref, context.checkouts(), context.runner(), availability=True, rules=True)
        the_plan = planner.divide_into_jobs(
            source.scenarios, run_matrix=ref.matrix, file_matrix=source.file_matrix,
            available_backends=source.available_backends, known_backends=list(source.backends),
            default_devices=default_devices(online), chunk_size=settings.job_chunk_size, gpus=gpus,
            scopes=source.scopes, costs=costs, risk=_risk(database, earlier, source.rules),
        )
        # What this process's spare runner warms next (WarmRunner.keep_spare): a planner lists, it warms
        # no backend itself, and without this its spare would warm every framework there is.
        context.runner().backends_used.update(job.backend for job in the_plan.jobs)
    except (CheckoutError, RunnerError, planner.PlanError) as exc:
        _fail(database, run_id, str(exc))
        return
    except DATABASE_UNAVAILABLE:
        raise  # the task is retried: nothing was stored
    except Exception as exc:  # a bug or an outage: the run must still end, with the reason
        log.exception("plan_run %s failed", run_id)
        _fail(database, run_id, f"planning failed: {type(exc).__name__}: {exc}")
        return
    # The cells a base run's results stand for are stored now; only the others become jobs.
    carry = carrying.decide(settings, run_id, source, the_plan, engine_options(source, ref))
    the_plan = planner.without_groups(the_plan, carry.groups)
    stored = _store(database, run_id, source, the_plan, carry)
    _send_all(run_alone(stored, run_here), send_job)
    if not the_plan.jobs and send_finalize is not None:
        send_finalize(run_id)  # every cell carried: no job will finalise the run


def run_alone(stored: list[tuple[int, str]], run_here: RunHere | None) -> list[tuple[int, str]]:
    """The jobs still to send once a plan of one job ran it here, in the planning process.

    A pull request that changed one rule is mostly one small job. Sent, it waits for a free process
    which takes a runner (a spare, or a cold start) and lists the scenarios again; here the runner that
    just listed them checks the cells at once. Delivery stays at least once: the job is stored before
    it runs, and should this process die, its lease lapses and the reconciler sends it as it sends any
    lost job. A plan of several jobs sends them all: spread over the workers they finish sooner.
    """
    if run_here is not None and len(stored) == 1 and run_here(*stored[0]):
        return []
    return stored


def _carried_whole(ref: RunRef, context: WorkerContext, send_finalize: SendFinalize | None) -> bool:
    """Whether the run was carried whole from its base, before any scenario was listed.

    A commit that changed nothing any base cell depends on (docs, files no cell ran) needs no runner:
    the checkout's files are digested here and the base's cells stored with their provenance
    (``carrying.carry_whole``). False: plan it as usual (anything changed, or any doubt).
    """
    sha, root = None, None
    if ref.repo_url is not None:
        try:
            sha, path = context.checkouts().checkout(ref.repo_url, ref.revision)
        except CheckoutError:
            return False  # the usual path says why
        root = str(path)
    source = Source(sha=sha, root=root, scenarios=(), backends={}, file_matrix=Matrix.from_mapping({}))
    carry = carrying.carry_whole(context.settings, ref.id, root, engine_options(source, ref))
    if carry is None:
        return False
    with session_scope(context.settings.database_url) as session:
        run = lock_run(session, ref.id)
        if run is None or run.cancel_requested or run.status in FINISHED_RUN_STATUSES or jobs_of_run(session, ref.id):
            return True  # cancelled meanwhile, or planned by a concurrent delivery
        if sha and run.head_sha != sha:
            run.head_sha = sha
        run.config = repository_config(root)
        run.started_at = run.started_at or utcnow()
        carrying.store_whole(session, ref.id, carry)
    log.info("run %s: carried whole from run %s (%d cells): nothing its cells depend on changed", ref.id,
             carry.summary.base_run_id, carry.summary.carried)
    if send_finalize is not None:
        send_finalize(ref.id)
    return True


def _costs(session: Session, earlier: int, run: RunRef, slots: int) -> Costs:
    """The weights of the run's jobs: its repository's last timed run's cells, ``earlier``'s.

    Shared among ``slots``, the jobs the online workers run at once: a worker of concurrency 8 takes
    eight jobs at a time, and a cut into four jobs per worker would leave half of its processes idle.
    A scenario whose references the run is offered is priced without them.
    """
    offered = (scenarios_with_references(session, run.repository_id)
               if run.repository_id is not None and offered_references(run) else set())
    return Costs(scenario_costs(session, earlier, offered), workers=max(1, slots))


def _risk(database: str, earlier: int | None, rules: Sequence[Mapping[str, Any]]) -> Risk | None:
    """Which cells to check first, from the earlier run (None: there is none).

    Those that reached a rule this checkout changed, then those that failed or nearly failed there.
    """
    if earlier is None:
        return None
    with session_scope(database, readonly=True) as session:
        changed = changed_rules(rules, rule_methods(session, earlier))
        return Risk.of_earlier_run(cells_reaching(session, earlier, changed), failing_cells(session, earlier))


def _store(database: str, run_id: int, source: Source, the_plan: planner.Plan,
           carry: carrying.Carry | None = None) -> list[tuple[int, str]]:
    with session_scope(database) as session:
        run = lock_run(session, run_id)
        # Cancelled while we planned, or planned by a concurrent delivery: nothing to add.
        if run is None or run.cancel_requested or run.status in FINISHED_RUN_STATUSES or jobs_of_run(session, run_id):
            return []
        if source.sha and run.head_sha != source.sha:
            run.head_sha = source.sha  # a ref resolved now: every job checks this exact commit
        record_catalog(session, run_id, source.scenarios)
        record_rules(session, run_id, source.rules)
        run.config = repository_config(source.root)
        run.omitted_cells = the_plan.omitted
        if the_plan.jobs:
            jobs = store_jobs(session, run, the_plan.jobs)
        else:  # every cell carried: the run stays queued, with no job, until finalize_run closes it; should
            # that message be lost, the reconciler sends the plan again (an unplanned run), which sends it again.
            jobs, run.started_at = [], run.started_at or utcnow()
        assert the_plan.matrix.backends is not None, "a plan's matrix is resolved"
        skipped = [cell for skip in the_plan.skipped for backend in the_plan.matrix.backends
                   if source.by_name[skip.scenario].has_cells_for(source.scopes.get(backend))
                   for cell in skip_cells(source, backend, skip.device, [(skip.scenario, d) for d in skip.dtypes],
                                          skip.reason)]
        upsert_results(session, run_id, skipped)
        if carry is not None:
            carrying.store(session, run_id, carry)
        log.info("run %s: %d cells in %d jobs, %d skipped, %d not made (backends of frameworks a scenario "
                 "gives no f for, or of other operators)", run_id, the_plan.cell_count, len(jobs), len(skipped),
                 the_plan.omitted)
        return [(job.id, job.queue) for job in jobs]


def skip_cells(source: Source, backend: str, device: str, cells: Iterable[tuple[str, str]],
               reason: str) -> list[dict[str, Any]]:
    """``skip`` cells of (scenario, dtype) pairs that no worker will check, with the reason."""
    kind: Mapping[str, Any] = source.backends.get(backend, {})
    return [Cell(scenario=name, operator=source.by_name[name].operator, framework=kind.get("framework", ""),
                 backend=backend, mode=kind.get("mode", ""), device=device, dtype=dtype, status=Status.SKIP,
                 message=reason[:500]).to_dict() | {"fingerprint": source.by_name[name].fingerprint}
            for name, dtype in cells if name in source.by_name]


def _end_waits(ref: RunRef, overdue: Sequence[WaitingJob], context: WorkerContext,
               send_finalize: SendFinalize | None) -> set[int]:
    """End the jobs that waited for a device too long: their cells ``skip`` with why, the job done.

    Returns the ids of those it ended (a worker may have claimed one meanwhile).
    """
    try:
        source = load_source(ref, context.checkouts(), context.runner())
    except (CheckoutError, RunnerError) as exc:  # the reconciler sends the plan again after its grace
        log.warning("run %s: cannot end the wait of its jobs: %s", ref.id, exc)
        return set()
    declared = {info.name: info.dtypes for info in source.scenarios}
    dtypes = source.requested(ref.matrix).dtypes
    ended, last = set(), False
    for waiting in overdue:
        message = f"{waiting.reason} (gave up after {context.settings.device_wait:g} s)"
        with session_scope(context.settings.database_url) as session:
            job = claim_overdue(session, waiting.job_id, within_s=context.settings.worker_online_s,
                                wait_s=context.settings.device_wait)
            if job is None:
                continue
            cells = planner.job_cells(job.scenarios, declared, dtypes)
            upsert_results(session, ref.id, skip_cells(source, job.backend, job.device, cells, message), job_id=job.id)
            last = finish_job(session, job.id, JobStatus.done.value, message)
        log.warning("job %s of run %s: %s", waiting.job_id, ref.id, message)
        ended.add(waiting.job_id)
    if last and send_finalize is not None:
        send_finalize(ref.id)
    return ended


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
