"""Minimal Celery app so that ``services.dispatch`` can send tasks by name.

Placeholder written with the storage/API work; the worker's own version (tasks, routing by device,
time limits, reliability settings) replaces it.
"""
from __future__ import annotations

from celery import Celery

from services.settings import get_settings

settings = get_settings()
settings.ensure_local_directories()

app = Celery("gradci", broker=str(settings.broker_url))
app.conf.update(
    broker_transport_options=settings.broker_transport_options(),
    task_routes={"gradci.plan_run": {"queue": "cpu"}, "gradci.finalize_run": {"queue": "cpu"}},
    task_acks_late=True,
    task_reject_on_worker_lost=True,
    worker_prefetch_multiplier=1,
    task_ignore_result=True,
)
