"""The queue side of the contract between the server and its workers.

Task names, queue names, which queue serves which device, and the Celery configuration both ends
share.

The server sends tasks by *name* through a producer app built here, so it never imports the
worker's code; ``gradci.worker.celery_app`` builds the consuming app from the same configuration.
Nothing is created at import: apps come from ``create_celery`` at start-up.
"""
from __future__ import annotations

from typing import Any

from celery import Celery

from gradci.scenarios.contract.devices import CPU, CUDA, validate_device
from gradci.services.settings import EMBEDDED_BROKER_SCHEMES, Settings, strip_broker_scheme

BROKER_TIMEOUT_S = 3.0  # a broker that does not answer within this is down: fail, don't hang

PLAN_RUN = "gradci.plan_run"
RUN_JOB = "gradci.run_job"
FINALIZE_RUN = "gradci.finalize_run"
PUBLISH_GITHUB = "gradci.publish_github"
HANDLE_DELIVERY = "gradci.handle_delivery"  # act on a stored GitHub webhook delivery
# Acting on deliveries, finalising and publishing: short, no accelerator, no repository code. Their
# queue has a consumer of its own beside every CPU worker's job pool (the worker's control node),
# so that a pull request's first answer never waits for a pool process that runs a job.
CONTROL_QUEUE = "control"
CONTROL_TASKS = (HANDLE_DELIVERY, FINALIZE_RUN, PUBLISH_GITHUB)
# Planning checks the commit out and lists its scenarios in a warm runner: a job's kind of work, done
# by the CPU workers' job pools, where the runners are.
PLAN_QUEUE = CPU
# Where the control tasks went before CONTROL_QUEUE existed: an API or worker of an earlier version may
# still send them there, and the CPU job pools still run them (they know every task).
EARLIER_CONTROL_QUEUE = CPU
TASK_QUEUES = {**{name: CONTROL_QUEUE for name in CONTROL_TASKS}, PLAN_RUN: PLAN_QUEUE}
EMBEDDED_TRANSPORT = "gradci.services.broker.embedded:Transport"


def broker_target(settings: Settings) -> tuple[str, str | None]:
    """(URL, transport) to open the broker with.

    An embedded broker's database URL with gradci's transport for it
    (``gradci.services.broker.embedded``); any other URL as it is, its transport named by its scheme.
    """
    if settings.broker_url.startswith(EMBEDDED_BROKER_SCHEMES):
        return strip_broker_scheme(settings.broker_url), EMBEDDED_TRANSPORT
    return settings.broker_url, None


def queue_for_device(device: str) -> str:
    """The queue a job for ``device`` is sent to: ``cpu``, ``cuda`` or ``cuda.smXY``."""
    validate_device(device)
    if device == CPU:
        return CPU
    if device.startswith(f"{CUDA}.sm"):
        return device
    return CUDA


def queue_of_task(task: str) -> str:
    """The queue ``task`` (one of ``TASK_QUEUES``) is sent to; a job's queue is its device's instead."""
    return TASK_QUEUES[task]


def queues_of_worker(device: str, capability: str | None = None) -> list[str]:
    """The queues the job pool of a worker of one local device (``cpu`` or ``cuda:N``) consumes.

    A GPU worker takes any-GPU jobs and those asking for its own compute capability. A CPU worker's
    control node consumes ``CONTROL_QUEUE`` beside it.
    """
    if device == CPU:
        return [CPU]
    return [CUDA] + ([f"{CUDA}.sm{capability}"] if capability else [])


def celery_config(settings: Settings) -> dict[str, Any]:
    """The Celery configuration both ends share, set for reliability as Celery's docs advise.

    Tasks are acknowledged only when done (``acks_late``), requeued when the process died
    (``reject_on_worker_lost``), one task reserved at a time, with soft and hard time limits, and a
    broker visibility timeout that outlives the hard limit so that Redis never hands a running job to a
    second worker. Redelivery is bounded by the attempt counter in the database, not here, and a message
    the broker lost is sent again by the worker that reconciles the database with the broker. No result
    backend: the database is the record.
    """
    return dict(
        broker_transport_options=settings.broker_transport_options(),
        broker_connection_retry_on_startup=True,
        broker_connection_timeout=BROKER_TIMEOUT_S,
        task_default_queue=PLAN_QUEUE,
        task_routes={name: {"queue": queue} for name, queue in TASK_QUEUES.items()},
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        # A broker that restarts must not cancel the jobs running meanwhile: their leases in the
        # database keep them theirs and they finish; what the broker lost the reconciler sends again.
        worker_cancel_long_running_tasks_on_connection_loss=False,
        worker_prefetch_multiplier=1,
        task_soft_time_limit=settings.job_soft_time_limit_s,
        task_time_limit=settings.job_hard_time_limit_s,
        task_ignore_result=True,
        result_backend=None,
        task_serializer="json",
        accept_content=["json"],
        # One task per pool process lifetime would lose the warm runner; keep processes alive.
        worker_max_tasks_per_child=None,
        worker_hijack_root_logger=False,
    )


def create_celery(settings: Settings, include: tuple[str, ...] = ()) -> Celery:
    """A Celery app on the settings' broker; ``include`` names the modules of tasks it runs."""
    settings.ensure_local_directories()
    url, transport = broker_target(settings)
    celery = Celery("gradci", broker=url, include=list(include), set_as_current=False)
    celery.conf.update(celery_config(settings), broker_transport=transport)
    return celery
