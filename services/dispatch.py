"""The one place the API touches the queue: sending ``plan_run`` and probing the broker.

Messages are sent by task *name* through the worker's Celery app, so the API never imports the
tasks' code (nor the frameworks they load).
"""
from __future__ import annotations

from kombu import Connection

from services.settings import Settings, get_settings

PLAN_RUN_TASK = "gradci.plan_run"
PUBLISH_TASK = "gradci.publish_github"
PLAN_QUEUE = "cpu"  # planning needs no accelerator
BROKER_TIMEOUT_S = 3.0


class DispatchError(RuntimeError):
    """The broker refused or could not be reached; the run was not queued."""


def _broker_connection(settings: Settings) -> Connection:
    settings.ensure_local_directories()
    return Connection(
        str(settings.broker_url),
        transport_options=settings.broker_transport_options(),
        connect_timeout=BROKER_TIMEOUT_S,
    )


def _send(task: str, run_id: int, settings: Settings | None) -> None:
    from worker.celery_app import app

    settings = settings or get_settings()
    try:
        with _broker_connection(settings) as connection:
            app.send_task(
                task,
                args=[run_id],
                queue=PLAN_QUEUE,
                connection=connection,
                retry_policy={"max_retries": 2, "interval_start": 0, "interval_step": 0.5, "interval_max": 1},
            )
    except Exception as exc:  # kombu raises transport-specific errors; all mean "not queued"
        raise DispatchError(f"could not queue {task} for run {run_id}: {exc}") from exc


def submit_plan(run_id: int, settings: Settings | None = None) -> None:
    """Queue ``gradci.plan_run(run_id)`` on the ``cpu`` queue. Call it after the run's row is
    committed: a fast worker could otherwise look for a run that does not exist yet."""
    _send(PLAN_RUN_TASK, run_id, settings)


def submit_publish(run_id: int, settings: Settings | None = None) -> None:
    """Queue ``gradci.publish_github(run_id)``: the run's commit statuses and PR comment."""
    _send(PUBLISH_TASK, run_id, settings)


def broker_status(settings: Settings | None = None) -> tuple[bool, str | None, int | None]:
    """(reachable, error message, messages waiting on the ``cpu`` queue)."""
    settings = settings or get_settings()
    try:
        with _broker_connection(settings) as connection:
            connection.ensure_connection(max_retries=1, interval_start=0, timeout=BROKER_TIMEOUT_S)
            # A real round trip on every transport (Redis LLEN, an SQL count for the embedded one).
            declared = connection.default_channel.queue_declare(queue=PLAN_QUEUE, passive=False)
            return True, None, int(declared.message_count)
    except Exception as exc:
        return False, f"{type(exc).__name__}: {exc}", None
