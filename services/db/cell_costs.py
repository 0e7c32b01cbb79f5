"""What each scenario's cells cost in the repository's last timed run: the planner's weights.

A cell's own timings (its first call, its reference, a steady call) leave out what its job spends
around it — importing a framework, warming a runner, the tolerance checks — so the job's measured
wall time (claimed to finished) is shared out among its cells in proportion to those timings. The
sum over a scenario's cells on a backend and kind of device is that scenario's cost there
(``gradci.services.job_balance``).
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from gradci.services.db.models import FINISHED_RUN_VALUES, Job, JobStatus, Result, Run
from gradci.services.job_balance import CostKey, device_kind


def last_timed_run(session: Session, run: Run) -> int | None:
    """The repository's latest finished run before ``run`` with a finished job, its base commit's first.

    Runs of the built-in library (no repository) follow the library's earlier runs.
    """
    same_repository = (Run.repository_id.is_(None) if run.repository_id is None
                       else Run.repository_id == run.repository_id)
    timed = (select(Run.id).join(Job, Job.run_id == Run.id)
             .where(same_repository, Run.id != run.id,
                    Run.status.in_(FINISHED_RUN_VALUES), Job.status == JobStatus.done.value,
                    Job.started_at.is_not(None), Job.finished_at.is_not(None)))
    if run.base_sha:
        at_base = session.scalar(timed.where(Run.head_sha == run.base_sha).order_by(Run.id.desc()).limit(1))
        if at_base is not None:
            return at_base
    return session.scalar(timed.order_by(Run.id.desc()).limit(1))


def scenario_costs(session: Session, run_id: int, references_offered: Collection[str] = frozenset()
                   ) -> dict[CostKey, float]:
    """Seconds per (scenario, backend, device kind) in run ``run_id``: its jobs' wall time shared out.

    ``references_offered``: scenarios whose references the run to plan is offered (kept from an earlier
    run, ``gradci.worker.reference_carrying``): their cells' share of the wall leaves out what computing
    the reference took. Priced with it, a pull request's few re-run cells look like several jobs' worth,
    and each extra job waits for a runner of its own.
    """
    walls = {job_id: (finished - started).total_seconds() for job_id, started, finished in session.execute(
        select(Job.id, Job.started_at, Job.finished_at)
        .where(Job.run_id == run_id, Job.status == JobStatus.done.value))
        if started is not None and finished is not None}
    cells = session.execute(
        select(Result.job_id, Result.scenario, Result.backend, Result.device,
               func.coalesce(Result.first_call_ms, 0) + func.coalesce(Result.time_ms, 0),
               func.coalesce(Result.reference_ms, 0))
        .where(Result.run_id == run_id, Result.job_id.in_(list(walls))).execution_options(yield_per=5000))
    by_job: dict[int, list[tuple[CostKey, float, float]]] = defaultdict(list)
    for job_id, scenario, backend, device, own_ms, reference_ms in cells:
        assert job_id is not None, "selected by job"
        by_job[job_id].append(((scenario, backend, device_kind(device)), float(own_ms), float(reference_ms)))
    costs: dict[CostKey, float] = defaultdict(float)
    for job_id, members in by_job.items():
        wall = max(walls[job_id], 0.0)
        total = sum(own + reference for _, own, reference in members)
        for key, own, reference in members:  # a job none of whose cells has a timing is shared out equally
            priced = own if key[0] in references_offered else own + reference
            costs[key] += wall * (priced / total if total > 0 else 1 / len(members))
    return dict(costs)
