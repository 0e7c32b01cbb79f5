"""Reconciling the database with the broker.

Work the database owes and no message will bring is sent again.

A broker can lose messages — Redis restarted without persistence, a task acknowledged after its
retries ran out, a worker that died whole holds its unacknowledged message until the visibility
timeout, hours later — while the database still says what is owed. One elected worker compares the
two after its heartbeats:

- lost jobs: running, but their delivery stopped renewing its lease (or their worker stopped
  beating): put back in the queue and sent again, unless a message for them waits in a queue
  (a worker holding one is not running it: the lease says so);
- stranded jobs: queued for longer than ``reconcile_grace_s`` since they were last sent, with no
  message waiting, nor held by a worker for less than ``held_credible_s`` (a retry waiting for
  its countdown is held that long; a worker that died holds its message for hours);
- unplanned runs: queued for longer than the grace with no job and no ``plan_run`` waiting or held;
- unfinalised runs: every job finished more than the grace ago, the run not, no ``finalize_run``
  waiting or held;
- unhandled deliveries: GitHub webhook deliveries stored more than the grace ago that no worker
  acted on, with no ``handle_delivery`` waiting or held (the API sends it after answering: a broker
  that was down then, or an API process that died, left none);
- runs with a job waiting for a device longer than GRADCI_DEVICE_WAIT (``gradci.services.db.waiting``: its
  queue no online worker serves): their ``plan_run`` is sent again, and planning stores that job's
  cells as ``skip`` with the reason it waited, so that the run finishes.

Idempotent and bounded: a job is sent again only by the reconciler whose conditional update won
it (once per grace), plans, finalisations and deliveries are idempotent tasks sent again at most
once per grace by this reconciler, ``claim_job`` drops a second delivery of a job that runs, the
attempt counter still bounds how often a job can take a worker down, and one pass sends at most
``BATCH`` of each.
"""
from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Iterable

from gradci.services.broker.messages import WAITING, TaskKey, UnknownTransport, broker_tasks
from gradci.services.broker.queues import (
    CONTROL_QUEUE,
    EARLIER_CONTROL_QUEUE,
    FINALIZE_RUN,
    HANDLE_DELIVERY,
    PLAN_QUEUE,
    PLAN_RUN,
    RUN_JOB,
)
from gradci.services.db.deliveries import unhandled_deliveries
from gradci.services.db.jobs import (
    lost_jobs,
    mark_resent,
    requeue_lost,
    stranded_jobs,
    unfinalized_runs,
    unplanned_runs,
)
from gradci.services.db.session import session_scope
from gradci.services.db.waiting import overdue_runs
from gradci.services.settings import Settings

log = logging.getLogger(__name__)

BATCH = 200
BrokerTasks = Callable[[Settings, Iterable[str]], dict[TaskKey, "float | None"]]


@dataclasses.dataclass(frozen=True)
class Senders:
    job: Callable[[int, str], None]  # (job id, queue)
    plan: Callable[[int], None]
    finalize: Callable[[int], None]
    delivery: Callable[[int], None]  # a stored webhook delivery's id


@dataclasses.dataclass
class Reconciled:
    """What one pass sent again."""
    lost_jobs: list[int] = dataclasses.field(default_factory=list)
    stranded_jobs: list[int] = dataclasses.field(default_factory=list)
    unplanned_runs: list[int] = dataclasses.field(default_factory=list)
    unfinalized_runs: list[int] = dataclasses.field(default_factory=list)
    overdue_runs: list[int] = dataclasses.field(default_factory=list)  # a job waited too long for a device
    unhandled_deliveries: list[int] = dataclasses.field(default_factory=list)

    def __bool__(self) -> bool:
        return any(dataclasses.astuple(self))


class Reconciler:
    def __init__(self, settings: Settings, send: Senders, *, held_credible_s: float,
                 broker: BrokerTasks = broker_tasks) -> None:
        self.settings, self.send, self.held_credible_s, self.broker = settings, send, held_credible_s, broker
        self._sent_at: dict[TaskKey, float] = {}  # plans and finalisations this reconciler sent again

    def __call__(self) -> Reconciled:
        settings, database = self.settings, self.settings.database_url
        grace, lease = settings.reconcile_grace_s, settings.worker_online_s
        with session_scope(database, readonly=True) as session:
            lost = lost_jobs(session, lease_s=lease, limit=BATCH)
            stranded = stranded_jobs(session, grace_s=grace, limit=BATCH)
            unplanned = unplanned_runs(session, grace_s=grace, limit=BATCH)
            unfinalized = unfinalized_runs(session, grace_s=grace, limit=BATCH)
            overdue = overdue_runs(session, within_s=lease, wait_s=settings.device_wait, limit=BATCH)
            unhandled = unhandled_deliveries(session, grace_s=grace, limit=BATCH)
        if not (lost or stranded or unplanned or unfinalized or overdue or unhandled):
            return Reconciled()
        # The control tasks' messages of an earlier version wait on the cpu queue: they count too.
        queues = {queue for _, queue in lost + stranded} | {CONTROL_QUEUE, PLAN_QUEUE, EARLIER_CONTROL_QUEUE}
        messages = self._messages(queues)
        if messages is None:  # a broker we cannot read: only a lapsed lease is proof enough
            stranded, unplanned, unfinalized, unhandled, messages = [], [], [], [], {}
        now = time.time()

        def waiting(key: TaskKey) -> bool:
            return key in messages and messages[key] is WAITING

        def held(key: TaskKey) -> bool:
            if key not in messages:
                return False
            taken_at = messages[key]
            return taken_at is WAITING or now - taken_at < self.held_credible_s

        lost = [(job_id, queue) for job_id, queue in lost if not waiting((RUN_JOB, job_id))]
        stranded = [(job_id, queue) for job_id, queue in stranded if not held((RUN_JOB, job_id))]
        with session_scope(database) as session:
            lost = [(job_id, queue) for job_id, queue in lost if requeue_lost(session, job_id, lease_s=lease)]
            stranded = [(job_id, queue) for job_id, queue in stranded
                        if mark_resent(session, job_id, grace_s=grace)]
        for kind, jobs in (("lost its worker", lost), ("lost its message", stranded)):
            for job_id, queue in jobs:
                log.warning("job %s %s: sent again to %s", job_id, kind, queue)
                self.send.job(job_id, queue)
        return Reconciled(
            lost_jobs=[job_id for job_id, _ in lost], stranded_jobs=[job_id for job_id, _ in stranded],
            unplanned_runs=self._send_runs(PLAN_RUN, [r for r in unplanned if not held((PLAN_RUN, r))], self.send.plan),
            unfinalized_runs=self._send_runs(FINALIZE_RUN, [r for r in unfinalized if not held((FINALIZE_RUN, r))],
                                             self.send.finalize),
            overdue_runs=self._send_runs(PLAN_RUN, [r for r in overdue if not held((PLAN_RUN, r))], self.send.plan),
            unhandled_deliveries=self._send_runs(HANDLE_DELIVERY, [d for d in unhandled
                                                                   if not held((HANDLE_DELIVERY, d))],
                                                 self.send.delivery))

    def _messages(self, queues: Iterable[str]) -> dict[TaskKey, float | None] | None:
        try:
            return self.broker(self.settings, queues)
        except UnknownTransport as exc:
            log.info("%s: only jobs whose lease lapsed are sent again", exc)
            return None

    def _send_runs(self, task: str, ids: list[int], send: Callable[[int], None]) -> list[int]:
        """Send a run's or a delivery's message again, at most once per grace from this reconciler.

        A plan can take longer than the grace, and the message it holds meanwhile may look stale.
        """
        now, sent = time.monotonic(), []
        self._sent_at = {key: at for key, at in self._sent_at.items() if now - at < self.settings.reconcile_grace_s}
        what = "delivery" if task == HANDLE_DELIVERY else "run"
        for sent_for in ids:
            if (task, sent_for) in self._sent_at:
                continue
            log.warning("%s %s lost its %s message: sent again", what, sent_for, task)
            send(sent_for)
            self._sent_at[task, sent_for] = now
            sent.append(sent_for)
        return sent
