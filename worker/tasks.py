"""The Celery tasks, thin shells over the modules that do the work, and the elected worker's chores.

The modules are ``gradci.services.github.intake``, ``gradci.worker.plan_run``,
``gradci.worker.job_execution``, ``gradci.services.db.jobs.finish_run``,
``gradci.services.github.publish`` and ``gradci.services.github.progress``, so that each can be
run and tested without a broker. The chores are what the elected worker does after its heartbeats.

Every task is idempotent, as acks_late requires: a delivery acted on is marked so with its runs, a
redelivered plan re-sends only waiting jobs, a redelivered job rewrites the same result rows,
finalising or publishing twice gives the same result.
A task whose database was unreachable is retried with backoff (``DATABASE_RETRY``), never
acknowledged as done; should its retries run out, the reconciler still finds what it owed.
"""
from __future__ import annotations

import functools
import logging
import threading
from typing import Any

from celery import shared_task

from gradci.scenarios.contract.devices import CPU
from gradci.services.broker.queues import (
    CONTROL_QUEUE,
    FINALIZE_RUN,
    HANDLE_DELIVERY,
    PLAN_QUEUE,
    PLAN_RUN,
    PUBLISH_GITHUB,
    RUN_JOB,
)
from gradci.services.db import jobs as job_store
from gradci.services.db.availability import DATABASE_UNAVAILABLE
from gradci.services.db.models import Run
from gradci.services.db.session import session_scope
from gradci.services.db.uploads import close_overdue
from gradci.services.db.workers import elected_worker
from gradci.services.github.intake import act_on_delivery
from gradci.services.github.progress import claim_progress, publish_progress
from gradci.services.github.publish import claim_due_reports, owe_reports, publish_run
from gradci.services.reports.run_report import store_report
from gradci.services.reports.targets import TargetConfigError
from gradci.services.settings import Settings
from gradci.worker.context import current
from gradci.worker.job_execution import JobExecution
from gradci.worker.plan_run import plan_jobs
from gradci.worker.recovery import Reconciler, Senders

log = logging.getLogger(__name__)

# 2, 4, 8 … 60 s with jitter: about ten minutes of outage before the reconciler has to step in.
DATABASE_RETRY: dict[str, Any] = dict(autoretry_for=DATABASE_UNAVAILABLE, retry_backoff=2, retry_backoff_max=60,
                                      retry_jitter=True, max_retries=12)
# Reconcile only once the database has answered this many beats in a row: after an outage every
# live worker must first have had the chance to renew its leases.
SETTLE_BEATS = 3
REPORTS_PER_SWEEP = 100


def send_job(job_id: int, queue: str) -> None:
    run_job.apply_async(args=[job_id], queue=queue)


def send_plan(run_id: int) -> None:
    plan_run.apply_async(args=[run_id], queue=PLAN_QUEUE)


def send_finalize(run_id: int) -> None:
    finalize_run.apply_async(args=[run_id], queue=CONTROL_QUEUE)


def send_publish(run_id: int) -> None:
    publish_github.apply_async(args=[run_id], queue=CONTROL_QUEUE)


def send_delivery(delivery_id: int) -> None:
    handle_delivery.apply_async(args=[delivery_id], queue=CONTROL_QUEUE)


def publish_now(run_id: int) -> None:
    """Publish a run's report in this process, now: the pending status a pull request sees first.

    Sent as a message instead, it waited behind the run's own plan (when both shared a queue) — the
    pending status came after planning, seconds after the webhook. A failure is the sweeper's to
    retry: the report stays owed.
    """
    publish_run(run_id, current().settings)


@shared_task(name=HANDLE_DELIVERY, **DATABASE_RETRY)
def handle_delivery(delivery_id: int) -> None:
    """Act on a stored GitHub delivery exactly once (a second message of it does nothing).

    Its runs are stored with the delivery marked processed, then their plans sent and their reports
    published from this task (the pending status and check run, before any plan could finish here).
    """
    act_on_delivery(current().settings, delivery_id, plan=send_plan, publish=publish_now)


@shared_task(name=PLAN_RUN, bind=True, **DATABASE_RETRY)
def plan_run(self, run_id: int) -> None:
    """Check out the run's commit, list its scenarios, store its jobs and queue them.

    Sent again, it ends the wait of jobs that waited for a device too long. A plan of one CPU job runs
    it here, in the runner that listed the scenarios (``plan_run.run_alone``).
    """
    context = current()
    worker_name = self.request.hostname or context.name

    def run_here(job_id: int, queue: str) -> bool:
        if queue != CPU or context.device.index is not None:
            return False  # a GPU job, or a GPU worker's process: the job's own queue decides who runs it
        # A delivery of its own: the plan's task id with "/job", so that a redelivered plan is another.
        JobExecution(job_id, context, worker_name, f"{self.request.id}/job", send_finalize, report_failure)()
        return True

    plan_jobs(run_id, context, send_job, send_finalize, run_here)


@shared_task(name=RUN_JOB, bind=True, **DATABASE_RETRY)
def run_job(self, job_id: int) -> None:
    """Check one job's cells in this worker's warm runner.

    The task id names the delivery: a retry or a redelivery keeps it, a second message of the same job
    has its own (``claim_job``).
    """
    context = current()
    JobExecution(job_id, context, self.request.hostname or context.name, self.request.id, send_finalize,
                 report_failure)()


def report_failure(run_id: int) -> None:
    """A job stored a failing cell while its run goes on: show the failures so far on GitHub.

    From a thread of its own, so that the job's cells go on meanwhile; at most one update per run
    every few seconds (``claim_progress``).
    """
    settings = current().settings
    if claim_progress(settings, run_id):
        threading.Thread(target=_publish_progress, args=(run_id, settings), name=f"gradci-progress-{run_id}",
                         daemon=True).start()


def _publish_progress(run_id: int, settings: Settings) -> None:
    try:
        publish_progress(run_id, settings)
    except Exception:  # best effort: the final report says it all
        log.exception("run %s: its failures so far were not shown", run_id)


@shared_task(name=FINALIZE_RUN, **DATABASE_RETRY)
def finalize_run(run_id: int) -> None:
    """Finish a run once its last job finished: counts, coverage, final status, then GitHub reports.

    The reports are its own GitHub report, and those of the pull requests whose base commit it checked
    (they were waiting for it). The reports are marked owed in the same transaction: should a message
    be lost, the sweeper sends them.
    """
    with session_scope(current().settings.database_url) as session:
        run = job_store.finish_run(session, run_id)
        if run is None:
            return
        log.info("run %s finished: %s (coverage %s)", run_id, run.status, run.coverage)
        reported = [run_id, *job_store.runs_reporting_against(session, run)]
        to_publish = owe_reports(session, reported, current().settings)
    for report_run in reported:  # before publishing: the comment then reads the stored report
        keep_report(report_run)
    for published in to_publish:
        send_publish(published)


def keep_report(run_id: int) -> None:
    """Store a finished run's report (against its base, which may just have finished).

    So no request has to compute it from a million cells. A report that cannot be computed stays
    unstored: the API computes it on request and says why.
    """
    with session_scope(current().settings.database_url) as session:
        run = session.get(Run, run_id)
        try:
            if run is not None:
                store_report(session, run)
        except TargetConfigError as exc:
            log.warning("run %s: report not stored: gradci.toml: %s", run_id, exc)


@shared_task(name=PUBLISH_GITHUB, **DATABASE_RETRY)
def publish_github(run_id: int) -> None:
    """Publish a run's commit statuses and pull-request comment (nothing for runs not from GitHub).

    GitHub being down leaves the report pending, with its next attempt set: the sweeper sends it then.
    """
    publish_run(run_id, current().settings)


@functools.cache
def reconciler() -> Reconciler:
    """This worker's reconciler (it remembers what it sent again, so it is made once)."""
    settings = current().settings
    # A retry waiting for its countdown holds its message as long as the longest backoff.
    return Reconciler(settings, Senders(job=send_job, plan=send_plan, finalize=send_finalize, delivery=send_delivery),
                      held_credible_s=settings.reconcile_grace_s + DATABASE_RETRY["retry_backoff_max"])


def periodic_chores(worker_name: str, healthy_for_s: float) -> None:
    """The elected worker's chores after each heartbeat.

    They run on one elected CPU worker (in its job node, the one that beats): send again what the
    broker lost, finish the upload runs whose wait for shards is over (GRADCI_UPLOAD_WAIT), then the
    GitHub reports whose backoff has expired — one message per report per step.
    """
    context = current()
    settings = context.settings
    if CPU not in context.device.queues:
        return
    with session_scope(settings.database_url, readonly=True) as session:
        if elected_worker(session, queue=CPU, within_s=settings.worker_online_s) != worker_name:
            return
    if healthy_for_s >= SETTLE_BEATS * settings.worker_heartbeat_s:
        reconciler()()
    with session_scope(settings.database_url) as session:
        overdue = close_overdue(session, limit=REPORTS_PER_SWEEP)
    for run_id in overdue:  # closed by this worker's conditional update: its one finalisation
        send_finalize(run_id)
    for run_id in claim_due_reports(settings, limit=REPORTS_PER_SWEEP):
        send_publish(run_id)
