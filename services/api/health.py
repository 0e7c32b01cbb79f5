"""/api/health: can this service take work? 503 when the database or the broker is down."""
from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse
from sqlalchemy import text

from gradci.services.api.deps import SettingsDep
from gradci.services.api.schemas import BrokerHealth, ComponentHealth, Health
from gradci.services.broker import dispatch
from gradci.services.db.session import sessionmaker_for
from gradci.services.db.workers import online_counts_by_device

router = APIRouter(prefix="/api/health", tags=["health"])


@router.get("", response_model=Health, responses={503: {"model": Health}})
def health(settings: SettingsDep) -> JSONResponse:
    workers_online: dict[str, int] = {}
    # No session dependency: a database that is down must give a 503 with details, not an error page.
    try:
        with sessionmaker_for(settings.database_url, readonly=True)() as session:
            session.execute(text("SELECT 1"))
            workers_online = online_counts_by_device(session, within_s=settings.worker_online_s)
        database = ComponentHealth(ok=True)
    except Exception as exc:  # noqa: BLE001 - whatever broke the database, health reports it
        database = ComponentHealth(ok=False, error=f"{type(exc).__name__}: {exc}".splitlines()[0])
    broker_ok, broker_error, queued = dispatch.broker_status(settings)
    broker = BrokerHealth(ok=broker_ok, error=broker_error, queued_plans=queued)
    healthy = database.ok and broker.ok
    body = Health(
        status="ok" if healthy else "unavailable", database=database, broker=broker, workers_online=workers_online
    )
    return JSONResponse(body.model_dump(mode="json"), status_code=200 if healthy else 503)
