"""The one place the API touches the queue: sending tasks by name, and probing the broker.

The tasks are ``handle_delivery`` (a stored webhook delivery), ``plan_run``, ``finalize_run`` (an
upload run whose shards are in) and ``publish_github``, each sent to its queue (``queue_of_task``).
The producer app comes from ``gradci.services.broker.queues``: the API never imports the worker's
tasks (nor the frameworks they load).
"""
from __future__ import annotations

import threading

from celery import Celery
from kombu import Connection

from gradci.services.broker.queues import (
    BROKER_TIMEOUT_S,
    FINALIZE_RUN,
    HANDLE_DELIVERY,
    PLAN_QUEUE,
    PLAN_RUN,
    PUBLISH_GITHUB,
    broker_target,
    create_celery,
    queue_of_task,
)
from gradci.services.settings import Settings


class DispatchError(RuntimeError):
    """The broker refused or could not be reached; the message was not queued."""


_producers: dict[str, Celery] = {}
_producers_lock = threading.Lock()


def _producer(settings: Settings) -> Celery:
    """One producer app per broker, made on first use (a sending app only needs the broker)."""
    with _producers_lock:
        if settings.broker_url not in _producers:
            _producers[settings.broker_url] = create_celery(settings)
        return _producers[settings.broker_url]


def broker_connection(settings: Settings) -> Connection:
    """A connection to the settings' broker that gives up after ``BROKER_TIMEOUT_S``."""
    settings.ensure_local_directories()
    url, transport = broker_target(settings)
    return Connection(url, transport=transport, transport_options=settings.broker_transport_options(),
                      connect_timeout=BROKER_TIMEOUT_S)


def _send(task: str, argument: int, settings: Settings, of: str = "run") -> None:
    # Through the producer app's connection pool: a connection per message halved the webhook
    # intake's throughput. The app's broker_connection_timeout still makes a down broker fail fast.
    try:
        _producer(settings).send_task(
            task,
            args=[argument],
            queue=queue_of_task(task),
            retry_policy={"max_retries": 2, "interval_start": 0, "interval_step": 0.5, "interval_max": 1},
        )
    except Exception as exc:  # kombu raises transport-specific errors; all mean "not queued"
        raise DispatchError(f"could not queue {task} for {of} {argument}: {exc}") from exc


def submit_delivery(delivery_id: int, settings: Settings) -> None:
    """Queue ``gradci.handle_delivery(delivery_id)`` (the row's id): a worker acts on the stored delivery."""
    _send(HANDLE_DELIVERY, delivery_id, settings, of="delivery")


def submit_plan(run_id: int, settings: Settings) -> None:
    """Queue ``gradci.plan_run(run_id)``.

    Call it after the run's row is committed: a fast worker could otherwise look for a run that does not
    exist yet.
    """
    _send(PLAN_RUN, run_id, settings)


def submit_finalize(run_id: int, settings: Settings) -> None:
    """Queue ``gradci.finalize_run(run_id)``: an upload run closed, its report is due."""
    _send(FINALIZE_RUN, run_id, settings)


def submit_publish(run_id: int, settings: Settings) -> None:
    """Queue ``gradci.publish_github(run_id)``: the run's commit statuses and PR comment."""
    _send(PUBLISH_GITHUB, run_id, settings)


def broker_status(settings: Settings) -> tuple[bool, str | None, int | None]:
    """(reachable, error message, messages waiting on the plans' queue, which CPU jobs share)."""
    try:
        with broker_connection(settings) as connection:
            connection.ensure_connection(max_retries=1, interval_start=0, timeout=BROKER_TIMEOUT_S)
            # A real round trip on every transport (Redis LLEN, an SQL count for the embedded one).
            declared = connection.default_channel.queue_declare(queue=PLAN_QUEUE, passive=False)
            return True, None, int(declared.message_count)
    except Exception as exc:  # noqa: BLE001 - any transport's failure is the broker's status, not a crash
        return False, f"{type(exc).__name__}: {exc}", None
