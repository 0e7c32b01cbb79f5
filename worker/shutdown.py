"""How a worker stops: SIGTERM and SIGINT both stop it within seconds.

SIGTERM comes from a service manager, ``docker stop`` or ``gradci up``, SIGINT from Ctrl-C. The
worker's running jobs are handed back to the broker.

Celery's default is a *warm* shutdown on either signal: it waits for the running tasks, and a job
may run for an hour, long after any service manager has lost patience and killed the worker —
and with it, on the embedded transport, the job's message. Celery's *cold* shutdown, which we
install for both signals here (as its ``REMAP_SIGTERM=SIGQUIT`` does for SIGTERM alone), cancels
the running tasks without acknowledging them; ``acks_late`` messages then go back to their queue
when the worker closes its broker connection, and the next worker runs them again (their cells
are upserted, their attempts counted). Runners die with their pool processes.
"""
from __future__ import annotations

from typing import Any

from celery import signals
from celery.apps.worker import install_worker_term_hard_handler


def _on_worker_ready(sender: Any = None, **_: Any) -> None:
    worker = getattr(sender, "controller", None)  # worker_ready is sent by the worker's consumer
    if worker is None:
        return
    for signame in ("SIGTERM", "SIGINT"):
        install_worker_term_hard_handler(worker, sig=signame)


def install() -> None:
    signals.worker_ready.connect(_on_worker_ready, weak=False)
