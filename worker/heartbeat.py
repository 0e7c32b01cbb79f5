"""The worker registry's writer: a worker records itself, then beats at intervals.

A worker records itself when Celery is ready and beats every ``worker_heartbeat_s`` from a daemon
thread of its main process (pool processes come and go; the main process lives as long as the
worker). ``GET /api/workers`` and ``/api/health`` read it.
After each beat the worker does its periodic chores (``install(after_beat=...)``: reconciling the
database with the broker, sweeping GitHub reports), told for how long the database has answered
every beat: just after an outage nobody could renew a lease, and a lapsed one means nothing yet.
"""
from __future__ import annotations

import logging
import platform
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from celery import signals

from gradci.services.db.session import session_scope
from gradci.services.db.workers import CONCURRENCY_KEY, record_heartbeat
from gradci.services.settings import Settings
from gradci.worker.context import WorkerContext, current
from gradci.worker.device_discovery import package_versions

log = logging.getLogger(__name__)

VERSIONED_PACKAGES = ("gradci", "torch", "jax", "jaxlib", "celery")


def versions() -> dict[str, Any]:
    """Versions from package metadata: nothing is imported (no framework in a worker's parent)."""
    return {"python": platform.python_version(), **package_versions(VERSIONED_PACKAGES)}


AfterBeat = Callable[[str, float], Any]  # (worker name, seconds the database has answered every beat)
Queues = Callable[[], list[str]]  # the queues a worker serves now, as its row lists them


class Heartbeat:
    def __init__(self, name: str, context: WorkerContext, after_beat: AfterBeat | None = None,
                 queues: Queues | None = None) -> None:
        """``queues``: what the worker serves, read at each beat (default: its device's job queues)."""
        self.name, self.context, self.after_beat = name, context, after_beat
        self.queues: Queues = queues or (lambda: context.device.queues)
        self.settings: Settings = context.settings
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="gradci-heartbeat", daemon=True)
        # The device record rides with the versions (a JSON column): which GPU model, driver, CUDA
        # and frameworks this worker's results come from; every job it claims stores the same record.
        # So does its concurrency: a run's jobs are cut for every job slot online, not every worker.
        self._versions = {**versions(), "device": context.device_record(), "isolation": context.isolation(),
                          CONCURRENCY_KEY: context.concurrency}
        self._first = True
        self._healthy_since: float | None = None  # monotonic time of the first beat after a failure

    def beat(self) -> None:
        from gradci.services.db.models import utcnow

        with session_scope(self.settings.database_url) as session:
            record_heartbeat(
                session, name=self.name, host=socket.gethostname(), device=self.context.device.name,
                queue=",".join(self.queues()), versions=self._versions,
                started_at=utcnow() if self._first else None,
            )
        self._first = False

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.beat()
            except Exception as exc:  # noqa: BLE001 - the database may be briefly away; the next beat retries
                self._healthy_since = None
                log.warning("heartbeat failed: %s", exc)
            else:
                self._healthy_since = self._healthy_since or time.monotonic()
                self._after_beat(time.monotonic() - self._healthy_since)
            self._stop.wait(self.settings.worker_heartbeat_s)

    def _after_beat(self, healthy_for_s: float) -> None:
        if self.after_beat is None:
            return
        try:
            self.after_beat(self.name, healthy_for_s)
        except Exception as exc:  # noqa: BLE001 - a chore failing (the broker away) must not stop the beats
            log.warning("periodic chores failed: %s: %s", type(exc).__name__, exc)

    def start(self) -> None:
        # The first beat before the worker takes its first message: a job it claims copies its
        # device record from the registry (services.db.jobs.claim_job).
        try:
            self.beat()
        except Exception as exc:  # noqa: BLE001 - as in the loop: the next beat retries
            log.warning("heartbeat failed: %s", exc)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


_heartbeat: Heartbeat | None = None
_after_beat: AfterBeat | None = None
_queues: Queues | None = None


def _on_worker_ready(sender: Any = None, **_: Any) -> None:
    global _heartbeat
    name = getattr(sender, "hostname", None) or current().name
    _heartbeat = Heartbeat(name, current(), _after_beat, _queues)
    _heartbeat.start()


def _on_worker_shutdown(**_: Any) -> None:
    if _heartbeat is not None:
        _heartbeat.stop()


def install(after_beat: AfterBeat | None = None, queues: Queues | None = None) -> None:
    """Connect to Celery's worker signals (weak=False: the handlers are module functions anyway)."""
    global _after_beat, _queues
    _after_beat, _queues = after_beat, queues
    signals.worker_ready.connect(_on_worker_ready, weak=False)
    signals.worker_shutdown.connect(_on_worker_shutdown, weak=False)
