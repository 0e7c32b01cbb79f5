"""The worker's Celery application: its configuration, task modules and lifecycle handlers.

The configuration is the one ``gradci.services.broker.queues`` shares with the API's producer; the
lifecycle handlers send heartbeats and shut the runner down.

Nothing happens at import: ``create_worker_app`` is called once, by ``gradci worker`` at start-up.
"""
from __future__ import annotations

from typing import Any

from celery import Celery, signals

from gradci.services.broker.queues import create_celery
from gradci.services.settings import Settings
from gradci.worker import heartbeat
from gradci.worker.runner import close_shared_runner

TASK_MODULES = ("gradci.worker.tasks",)


def create_worker_app(settings: Settings) -> Celery:
    """The app a worker process consumes with.

    It becomes the process's current app, which the tasks (``shared_task``) are bound to.
    """
    from gradci.worker.tasks import periodic_chores

    app = create_celery(settings, include=TASK_MODULES)
    app.set_current()
    app.set_default()
    heartbeat.install(after_beat=periodic_chores)
    signals.worker_process_shutdown.connect(_stop_runner, weak=False)
    signals.worker_shutdown.connect(_stop_runner, weak=False)  # a solo or threads pool runs tasks here
    return app


def _stop_runner(**_: Any) -> None:
    close_shared_runner()
