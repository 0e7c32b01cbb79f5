"""Jobs waiting for a device: queued on a queue that no online worker consumes.

Each comes with the reason in words ("waiting for a cuda worker; none online", "waiting for a
cuda.sm90 worker; online: cuda.sm80") and since when. ``GET /api/runs/{id}``, ``gradci status`` and
the dashboard show them; the reconciler (``gradci.worker.recovery``) has the runs of those waiting
longer than GRADCI_DEVICE_WAIT planned again, and planning (``gradci.worker.plan_run``) then stores
their cells as ``skip`` with the reason.

A job waits from when it was stored, or last taken by a worker (one whose worker died is queued
again): re-sending a job that lost its message does not restart its wait.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta

from sqlalchemy import ColumnElement, func, select
from sqlalchemy.orm import Session

from gradci.scenarios.contract.devices import CPU
from gradci.scenarios.contract.requirements import memory_text
from gradci.services.db.jobs import lock_run
from gradci.services.db.models import FINISHED_RUN_VALUES, Job, JobStatus, Run, Worker, utcnow
from gradci.services.db.workers import gpu_offer, online_workers, worker_queues
from gradci.services.planner import PARKED, queue_description


@dataclasses.dataclass(frozen=True)
class WaitingJob:
    job_id: int
    run_id: int
    backend: str
    device: str
    queue: str
    reason: str
    since: datetime


def waiting_since() -> ColumnElement[datetime]:
    # started_at is set at each claim, after created_at: the later of the two.
    return func.coalesce(Job.started_at, Job.created_at)


def waiting_reason(queue: str, online: Sequence[Worker]) -> str:
    """Why a job of ``queue`` waits, naming the online workers of its kind (CPU or GPU) instead."""
    wanted = queue_description(queue)
    if queue == CPU:
        others: list[str] = []
    else:
        gpus = sorted({(offer.capability, offer.memory_total) for offer in map(gpu_offer, online)
                       if offer and offer.capability is not None},
                      key=lambda gpu: (int(gpu[0] or 0), gpu[1] or 0))
        # For a memory need the memory of each is what matters; else their capability queues.
        others = [f"cuda.sm{capability}" + (f" ({memory_text(memory)})" if PARKED.match(queue) and memory else "")
                  for capability, memory in gpus]
        others = list(dict.fromkeys(others))
    return f"waiting for {wanted}; " + (f"online: {', '.join(others)}" if others else "none online")


def waiting_jobs(session: Session, *, within_s: float, run_ids: Iterable[int] | None = None,
                 waited_s: float | None = None, limit: int | None = None) -> list[WaitingJob]:
    """Queued jobs of unfinished runs that no online worker would take, oldest first.

    An online worker is one that beat within ``within_s``. Of ``run_ids`` only, and those waiting longer
    than ``waited_s``, when given.
    """
    online = online_workers(session, within_s=within_s)
    served = sorted({queue for worker in online for queue in worker_queues(worker)})
    since = waiting_since().label("since")
    query = (select(Job.id, Job.run_id, Job.backend, Job.device, Job.queue, since).join(Run, Run.id == Job.run_id)
             .where(Job.status == JobStatus.queued.value, Run.cancel_requested.is_(False),
                    Run.status.not_in(FINISHED_RUN_VALUES))
             .order_by(since, Job.id))
    if served:
        query = query.where(Job.queue.not_in(served))
    if run_ids is not None:
        query = query.where(Job.run_id.in_(list(run_ids)))
    if waited_s is not None:
        query = query.where(waiting_since() < utcnow() - timedelta(seconds=waited_s))
    if limit is not None:
        query = query.limit(limit)
    rows = session.execute(query).all()
    reasons = {queue: waiting_reason(queue, online) for queue in {row.queue for row in rows}}  # once a queue
    return [WaitingJob(job_id, run_id, backend, device, queue, reasons[queue], when)
            for job_id, run_id, backend, device, queue, when in rows]


def waiting_by_run(session: Session, run_ids: Sequence[int], *, within_s: float) -> dict[int, list[WaitingJob]]:
    """``waiting_jobs`` of each run (every run of ``run_ids`` has a list, perhaps empty)."""
    found: dict[int, list[WaitingJob]] = {run_id: [] for run_id in run_ids}
    if run_ids:
        for job in waiting_jobs(session, within_s=within_s, run_ids=run_ids):
            found[job.run_id].append(job)
    return found


def overdue_runs(session: Session, *, within_s: float, wait_s: float, limit: int) -> list[int]:
    """Runs with a job that has waited for a device longer than ``wait_s``."""
    jobs = waiting_jobs(session, within_s=within_s, waited_s=wait_s, limit=limit)
    return list(dict.fromkeys(job.run_id for job in jobs))


def claim_overdue(session: Session, job_id: int, *, within_s: float, wait_s: float) -> Job | None:
    """The job, locked, while it still waits for a device longer than ``wait_s``; else None.

    Locked run first, then job, as everywhere. One a worker claimed, or whose queue a worker now serves,
    is left alone (None).
    """
    run_id = session.scalar(select(Job.run_id).where(Job.id == job_id))
    if run_id is None or lock_run(session, run_id) is None:
        return None
    job = session.scalars(select(Job).where(Job.id == job_id).with_for_update()).one_or_none()
    still = {waiting.job_id for waiting in waiting_jobs(session, within_s=within_s, run_ids=[run_id], waited_s=wait_s)}
    return job if job is not None and job.id in still else None
