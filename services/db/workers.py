"""The worker registry: heartbeats in, "who is online" (and with which device, which queues) out."""
from __future__ import annotations

from collections import Counter
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from gradci.scenarios.contract.requirements import DeviceOffer
from gradci.services.db.models import Worker, database_now, utcnow
from gradci.services.db.upsert import dialect_insert
from gradci.services.planner import GpuWorkers


def record_heartbeat(
    session: Session,
    *,
    name: str,
    host: str,
    device: str,
    queue: str,
    versions: dict[str, Any] | None = None,
    started_at: datetime | None = None,
) -> None:
    """Insert or refresh a worker's row.

    ``started_at`` is kept from the first beat unless given (a restarted worker passes its new start
    time). The beat is stamped by the database's clock, by which every worker's is judged
    (``database_now``).
    """
    now = database_now(session)
    insert = dialect_insert(session, Worker.__table__)
    values = {
        "name": name,
        "host": host,
        "device": device,
        "queue": queue,
        "versions": versions or {},
        "started_at": started_at or now,
        "last_heartbeat": now,
    }
    refreshed = ["host", "device", "queue", "versions", "last_heartbeat"] + (["started_at"] if started_at else [])
    statement = insert.values(**values).on_conflict_do_update(
        index_elements=["name"], set_={column: insert.excluded[column] for column in refreshed}
    )
    session.execute(statement)


def is_online(worker: Worker, *, within_s: float, now: datetime | None = None) -> bool:
    return worker.last_heartbeat >= (now or utcnow()) - timedelta(seconds=within_s)


def list_workers(session: Session) -> list[Worker]:
    return list(session.scalars(select(Worker).order_by(Worker.device, Worker.name)))


CONCURRENCY_KEY = "concurrency"  # in a worker's versions record: the jobs it runs at once


def online_slots(session: Session, *, within_s: float) -> int:
    """Jobs the workers that beat within ``within_s`` seconds run at once: each one's concurrency.

    A worker whose record names none (one of an earlier version) counts as one.
    """
    cutoff = database_now(session) - timedelta(seconds=within_s)
    records = session.scalars(select(Worker.versions).where(Worker.last_heartbeat >= cutoff))
    return sum(_concurrency(versions) for versions in records)


def _concurrency(versions: dict[str, Any] | None) -> int:
    value = (versions or {}).get(CONCURRENCY_KEY)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 1


def online_counts_by_device(session: Session, *, within_s: float) -> dict[str, int]:
    """Workers that beat within ``within_s`` seconds, per device."""
    cutoff = database_now(session) - timedelta(seconds=within_s)
    devices = session.scalars(select(Worker.device).where(Worker.last_heartbeat >= cutoff))
    return dict(Counter(devices))


def elected_worker(session: Session, *, queue: str, within_s: float) -> str | None:
    """The online worker of ``queue`` that does the chores one worker should do: the first by name.

    The chores are reconciling and sweeping reports. Needs no lock: should two workers both believe they
    are elected for a moment, every chore still claims its items atomically.
    """
    cutoff = database_now(session) - timedelta(seconds=within_s)
    names = session.execute(select(Worker.name, Worker.queue).where(Worker.last_heartbeat >= cutoff)
                            .order_by(Worker.name))
    return next((name for name, queues in names if queue in queues.split(",")), None)


def online_workers(session: Session, *, within_s: float) -> list[Worker]:
    cutoff = database_now(session) - timedelta(seconds=within_s)
    return list(session.scalars(select(Worker).where(Worker.last_heartbeat >= cutoff).order_by(Worker.name)))


def worker_queues(worker: Worker) -> list[str]:
    """The queues a worker consumes (its row keeps them comma-separated)."""
    return [queue for queue in worker.queue.split(",") if queue]


def gpu_offer(worker: Worker) -> DeviceOffer | None:
    """A GPU worker's device as its heartbeat described it (None: a CPU worker)."""
    record = (worker.versions or {}).get("device") or {"device": worker.device}
    offer = DeviceOffer.from_record(record)
    return offer if offer.kind != "cpu" and offer.capability else None


def gpu_workers(session: Session, *, within_s: float) -> GpuWorkers:
    """The GPUs the planner routes by: those of workers online now, and of every worker seen."""
    now = database_now(session)
    rows = [(worker, gpu_offer(worker)) for worker in list_workers(session)]
    return GpuWorkers(online=tuple(offer for worker, offer in rows if offer and is_online(worker, within_s=within_s,
                                                                                         now=now)),
                      known=tuple(offer for _, offer in rows if offer))
