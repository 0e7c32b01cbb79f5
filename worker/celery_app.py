"""The Celery application, configured from ``Settings``.

Reliability follows Celery's own advice and DESIGN.md's pitfalls: a task is acknowledged only
when it finished (``acks_late``) and is requeued when its process died
(``reject_on_worker_lost``), each process reserves one task at a time (prefetch 1), jobs have
soft and hard time limits, and the broker's visibility timeout outlives the hard limit so Redis
never hands a running job to a second worker. Redelivery is bounded by the attempt counter in the
database (``services.db.jobs.claim_job``), not here. No result backend: the database is the record.

Importing this module is cheap and loads no task code, so the API can send tasks by name.
"""
from __future__ import annotations

from celery import Celery

from services.settings import Settings, get_settings
from worker.devices import CPU

PLAN_RUN = "gradci.plan_run"
RUN_JOB = "gradci.run_job"
FINALIZE_RUN = "gradci.finalize_run"
PUBLISH_GITHUB = "gradci.publish_github"  # services.dispatch.PUBLISH_TASK


def create_celery(settings: Settings) -> Celery:
    settings.ensure_local_directories()
    celery = Celery("gradci", broker=str(settings.broker_url), include=["worker.tasks"])
    celery.conf.update(
        broker_transport_options=settings.broker_transport_options(),
        broker_connection_retry_on_startup=True,
        # Planning, finalising and publishing need no accelerator; run_job is sent to its device's queue.
        task_default_queue=CPU,
        task_routes={name: {"queue": CPU} for name in (PLAN_RUN, FINALIZE_RUN, PUBLISH_GITHUB)},
        task_acks_late=True,
        task_reject_on_worker_lost=True,
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
    return celery


app = create_celery(get_settings())
