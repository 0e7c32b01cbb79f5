"""The Celery tasks: thin shells over ``worker.planning``, ``worker.execute``,
``services.db.jobs.finalize_run`` and ``services.github.publish``, so that each can be run and
tested without a broker.

Every task is idempotent, as acks_late requires: a redelivered plan re-sends only waiting jobs, a
redelivered job rewrites the same result rows, finalising or publishing twice gives the same result.
"""
from __future__ import annotations

import logging

from celery import shared_task

from services.db import jobs as job_store
from services.db.session import session_scope
from services.github.client import GitHubError
from services.queues import CONTROL_QUEUE, FINALIZE_RUN, PLAN_RUN, PUBLISH_GITHUB, RUN_JOB
from worker.context import current
from worker.execute import JobExecution
from worker.planning import plan
from worker.recovery import recover_orphaned_jobs

log = logging.getLogger(__name__)


def send_job(job_id: int, queue: str) -> None:
    run_job.apply_async(args=[job_id], queue=queue)


def send_finalize(run_id: int) -> None:
    finalize_run.apply_async(args=[run_id], queue=CONTROL_QUEUE)


@shared_task(name=PLAN_RUN, bind=True)
def plan_run(self, run_id: int) -> None:  # type: ignore[no-untyped-def]
    """Check out the run's commit, list its scenarios, store its jobs and queue them."""
    plan(run_id, current(), send_job)


@shared_task(name=RUN_JOB, bind=True)
def run_job(self, job_id: int) -> None:  # type: ignore[no-untyped-def]
    """Check one job's cells in this worker's warm runner."""
    context = current()
    JobExecution(job_id, context, self.request.hostname or context.name, send_finalize)()


@shared_task(name=FINALIZE_RUN)
def finalize_run(run_id: int) -> None:
    """Counts, coverage and the run's final status once its last job finished; then its GitHub
    report, and those of the pull requests whose base commit it checked (they were waiting for it)."""
    with session_scope(current().settings.database_url) as session:
        run = job_store.finalize_run(session, run_id)
        if run is None:
            return
        log.info("run %s finished: %s (coverage %s)", run_id, run.status, run.coverage)
        to_publish = [run_id, *job_store.runs_reporting_against(session, run)]
    for published in to_publish:
        publish_github.apply_async(args=[published], queue=CONTROL_QUEUE)


@shared_task(name=PUBLISH_GITHUB, autoretry_for=(GitHubError,), retry_backoff=5, retry_backoff_max=600,
          max_retries=8)
def publish_github(run_id: int) -> None:
    """Commit statuses and the pull-request comment of a run (nothing for runs not from GitHub).
    GitHub being down is retried with backoff; the report stays pending in the database meanwhile."""
    from services.github.publish import publish_run

    publish_run(run_id, current().settings)


# A report still pending this long after its last attempt lost its retry (a worker died holding
# it, or the retries ran out during a long outage): send it again. Publishing is idempotent.
STALE_REPORT_S = 900


def periodic_chores() -> None:
    """After each heartbeat: re-send the jobs of dead workers, and reports owed to GitHub too long."""
    from services.github.publish import stale_pending_reports

    context = current()
    recover_orphaned_jobs(context.settings, context.device.queues, send_job)
    if CONTROL_QUEUE in context.device.queues:
        for run_id in stale_pending_reports(context.settings, STALE_REPORT_S):
            publish_github.apply_async(args=[run_id], queue=CONTROL_QUEUE)
