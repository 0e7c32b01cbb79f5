"""The workers page: who is online and what each runs, and what waits.

It shows the workers' devices with memory and versions, what each runs now, how many jobs wait in
each queue, and which jobs wait for a device and why.
"""
from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse

from gradci.services.api.access import OperatorAccess
from gradci.services.api.deps import ReadSession, SettingsDep
from gradci.services.db import queries
from gradci.services.db.models import Worker, utcnow
from gradci.services.db.waiting import waiting_jobs
from gradci.services.db.workers import is_online, list_workers, worker_queues
from gradci.web.device_record import device_summary, frameworks
from gradci.web.templating import templates

router = APIRouter(include_in_schema=False)
# A heartbeat's resident memory of the worker's host processes, where it reports one (bytes).
RESIDENT_KEYS = ("rss_bytes", "resident_bytes")
WAITING_SHOWN = 100  # jobs waiting for a device listed, oldest first


def worker_row(worker: Worker, online: bool, job: Any) -> dict[str, Any]:
    """One worker as the table shows it.

    Its device record (``versions["device"]``) summarised, the device's memory, the host's resident
    memory when the heartbeat has it, and its versions.
    """
    device = worker.versions.get("device")
    record: dict[str, Any] = device if isinstance(device, dict) else {}
    packages = {name: version for name, version in worker.versions.items() if isinstance(version, str | None)
                and name not in RESIDENT_KEYS}
    packages.update({name: version for name, version in frameworks(record) if name not in packages})
    resident = next((worker.versions[key] for key in RESIDENT_KEYS if isinstance(worker.versions.get(key), int)), None)
    isolation = worker.versions.get("isolation")
    return {"worker": worker, "online": online, "job": job, "device": device_summary(record),
            "isolation": isolation_summary(isolation if isinstance(isolation, dict) else {}),
            "memory_total": record.get("memory_total"), "memory_free": record.get("memory_free"),
            "resident": resident, "versions": packages}


def isolation_summary(isolation: dict[str, Any]) -> dict[str, Any]:
    """The runners' box in a line, and whether it holds.

    ``ok`` is False where repository code runs unboxed (or the worker predates the report).
    """
    if not isolation:
        return {"ok": False, "line": "not reported (a worker older than the runner's box)"}
    if isolation.get("sandbox") == "none":
        return {"ok": False, "line": f"no box: {isolation.get('reason')}; repository code "
                                     f"{isolation.get('repository_code', 'refused')}"}
    memory = isolation.get("memory_limit_mb")
    limits = [f"{isolation.get('pids_max')} processes", f"{memory} MB" if memory else "memory unbounded",
              f"scratch {isolation.get('scratch_mb')} MB", f"by {isolation.get('limits')}"]
    return {"ok": True, "line": f"{isolation.get('version')}: {', '.join(map(str, isolation.get('namespaces', [])))} "
                                f"namespaces; {isolation.get('identity')}; {', '.join(limits)}"}


def queue_rows(workers: list[dict[str, Any]], depths: dict[str, int]) -> list[dict[str, Any]]:
    """Every queue a registered worker consumes or a job waits in.

    For each: its depth (0 included) and how many online workers consume it (a worker's ``queue``
    lists its queues, comma-separated).
    """
    consumers: dict[str, int] = {}
    for row in workers:
        for queue in worker_queues(row["worker"]):
            consumers[queue] = consumers.get(queue, 0) + row["online"]
    return [{"queue": queue, "depth": depths.get(queue, 0), "online": consumers.get(queue, 0)}
            for queue in sorted(set(consumers) | set(depths))]


@router.get("/workers", response_class=HTMLResponse)
def workers_page(request: Request, session: ReadSession, settings: SettingsDep, _: OperatorAccess):
    now = utcnow()
    running = {job.worker: job for job in queries.running_jobs(session) if job.worker}
    workers = [worker_row(worker, is_online(worker, within_s=settings.worker_online_s, now=now),
                          running.get(worker.name)) for worker in list_workers(session)]
    return templates.TemplateResponse(request, "workers.html", {
        "workers": workers, "queues": queue_rows(workers, queries.queue_depths(session)), "now": now,
        "waiting": waiting_jobs(session, within_s=settings.worker_online_s, limit=WAITING_SHOWN),
        "waiting_shown": WAITING_SHOWN})
