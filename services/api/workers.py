"""/api/workers: the registered workers and whether they are online."""
from __future__ import annotations

from fastapi import APIRouter

from services.api.deps import ReadSession, SettingsDep
from services.api.schemas import WorkerOut
from services.db.models import utcnow
from services.db.workers import is_online, list_workers

router = APIRouter(prefix="/api/workers", tags=["workers"])


@router.get("")
def get_workers(session: ReadSession, settings: SettingsDep) -> list[WorkerOut]:
    """Every worker that ever sent a heartbeat; ``online``: one arrived within GRADCI_WORKER_ONLINE_S."""
    now = utcnow()
    return [
        WorkerOut(
            name=worker.name,
            host=worker.host,
            device=worker.device,
            queue=worker.queue,
            versions=worker.versions,
            started_at=worker.started_at,
            last_heartbeat=worker.last_heartbeat,
            online=is_online(worker, within_s=settings.worker_online_s, now=now),
        )
        for worker in list_workers(session)
    ]
