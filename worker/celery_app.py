"""The worker's Celery application: its configuration, task modules, node arguments and lifecycle handlers.

The configuration is the one ``gradci.services.broker.queues`` shares with the API's producer; the
lifecycle handlers send heartbeats (a job node's) and shut the runner down.

Nothing happens at import: ``create_worker_app`` is called once, by ``gradci worker`` at start-up (and
by its control node, ``gradci.worker.control_node``).
"""
from __future__ import annotations

import logging
from typing import Any

from celery import Celery, signals

from gradci.services.broker.queues import create_celery
from gradci.services.settings import Settings
from gradci.worker import heartbeat
from gradci.worker.runner import close_shared_runner

TASK_MODULES = ("gradci.worker.tasks",)


def create_worker_app(settings: Settings, served_queues: heartbeat.Queues | None = None, *,
                      beats: bool = True) -> Celery:
    """The app a worker process consumes with.

    It becomes the process's current app, which the tasks (``shared_task``) are bound to. A job node
    beats, its row listing ``served_queues()`` (default: its device's), and may be elected for the
    chores; a control node (``beats=False``) does neither: its job node beats for the pair.
    """
    from gradci.worker.tasks import periodic_chores

    app = create_celery(settings, include=TASK_MODULES)
    app.set_current()
    app.set_default()
    if beats:
        heartbeat.install(after_beat=periodic_chores, queues=served_queues)
    if beats and settings.runner_spare:  # a job node's processes: the control node lists no checkout
        signals.task_postrun.connect(_keep_spare, weak=False)
    signals.worker_process_shutdown.connect(_stop_runner, weak=False)
    signals.worker_shutdown.connect(_stop_runner, weak=False)  # a solo or threads pool runs tasks here
    return app


def celery_argv(name: str, queues: list[str], pool: str, concurrency: int, loglevel: str) -> list[str]:
    """``celery worker``'s arguments for one node of a gradci worker (its job node or its control node)."""
    return [
        "worker",
        f"--hostname={name}",
        f"--queues={','.join(queues)}",
        f"--pool={pool}",
        f"--concurrency={concurrency}",
        f"--loglevel={loglevel}",
        # Gossip and mingle chatter between workers: nothing here uses it.
        "--without-gossip",
        "--without-mingle",
    ]


def _stop_runner(**_: Any) -> None:
    close_shared_runner()


def _keep_spare(**_: Any) -> None:
    """Start this process's spare runner, unless it has one, before it waits for its next task.

    Only in a process that ran a pull request's checkout, the only kind a spare serves: a service that
    checks its default branches alone keeps no idle runner. The spare warms the backends this
    process's runners used (every backend, before any was).
    """
    from gradci.scenarios.backends import backend_names
    from gradci.worker.context import current

    try:
        runner = current().runner()
        if runner.served_pull_request:
            runner.keep_spare(sorted(runner.backends_used) or backend_names())
    except Exception:  # a spare is an optimisation: a task starts its own runner without one
        logging.getLogger(__name__).exception("no spare runner")
