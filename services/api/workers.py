"""/api/workers: the registered workers and whether they are online."""
from __future__ import annotations

from fastapi import APIRouter

from gradci.services.api.access import OperatorAccess
from gradci.services.api.deps import ReadSession, SettingsDep
from gradci.services.api.errors import errors
from gradci.services.api.schemas import WorkerOut, from_row
from gradci.services.db.models import utcnow
from gradci.services.db.workers import is_online, list_workers

router = APIRouter(prefix="/api/workers", tags=["workers"])


@router.get("", responses=errors(401, 403))
def get_workers(session: ReadSession, settings: SettingsDep, _: OperatorAccess) -> list[WorkerOut]:
    """Every worker that ever sent a heartbeat, for operators only.

    ``online``: one arrived within GRADCI_WORKER_ONLINE_S. Host names, versions and devices are the
    operator's.
    """
    now = utcnow()
    return [
        from_row(WorkerOut, worker, online=is_online(worker, within_s=settings.worker_online_s, now=now))
        for worker in list_workers(session)
    ]
