"""The workers page: who is online, their devices and versions, what each runs now, and how many jobs
wait in each queue."""
from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse

from services.api.deps import ReadSession, SettingsDep
from services.db import queries
from services.db.models import utcnow
from services.db.workers import is_online, list_workers
from web.templating import templates

router = APIRouter(include_in_schema=False)


@router.get("/workers", response_class=HTMLResponse)
def workers_page(request: Request, session: ReadSession, settings: SettingsDep):
    now = utcnow()
    running = {job.worker: job for job in queries.running_jobs(session) if job.worker}
    workers = [{"worker": worker, "online": is_online(worker, within_s=settings.worker_online_s, now=now),
                "job": running.get(worker.name)} for worker in list_workers(session)]
    return templates.TemplateResponse(request, "workers.html", {
        "workers": workers, "queues": queries.queue_depths(session), "now": now})
