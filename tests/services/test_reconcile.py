"""The claim and the reconciler against real databases (PostgreSQL and SQLite) and a real broker
(Redis; the embedded SQLAlchemy transport): a running job belongs to the delivery that claimed it
while its lease is renewed, deliveries at once run a job once, and the reconciler sends again exactly
what the broker lost (jobs, plans, finalisations, webhook deliveries no worker acted on) — once,
however often it looks.
"""
from __future__ import annotations

import base64
import json
import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import update

from gradci.services.broker.messages import WAITING, broker_tasks
from gradci.services.broker.queues import (
    CONTROL_QUEUE,
    EARLIER_CONTROL_QUEUE,
    FINALIZE_RUN,
    HANDLE_DELIVERY,
    PLAN_RUN,
    RUN_JOB,
    create_celery,
    queue_of_task,
)
from gradci.services.db.deliveries import store_delivery
from gradci.services.db.jobs import (
    Claim,
    claim_job,
    finish_job,
    holds_job,
    jobs_of_run,
    lock_run,
    renew_lease,
    store_jobs,
)
from gradci.services.db.models import Delivery, Job, JobStatus, Run, utcnow
from gradci.services.db.session import session_scope
from gradci.services.db.workers import record_heartbeat
from gradci.services.planner import JobSpec
from gradci.services.settings import Settings
from gradci.worker.recovery import Reconciled, Reconciler, Senders

LEASE_S = 60.0
GRACE_S = 30.0
LONG_AGO = timedelta(hours=1)


def new_jobs(url: str, run_id: int, count: int) -> list[int]:
    with session_scope(url) as session:
        jobs = store_jobs(session, lock_run(session, run_id),
                          [JobSpec("fd", "cpu", "cpu", (f"s{i}",)) for i in range(count)])
        return [job.id for job in jobs]


def claim(url: str, job_id: int, delivery: str, worker: str = "cpu-1@here") -> tuple[Claim, int]:
    with session_scope(url) as session:
        outcome, job = claim_job(session, job_id, worker=worker, delivery=delivery, max_attempts=5, lease_s=LEASE_S)
        return outcome, job.attempts


def set_job(url: str, job_id: int, **values) -> None:  # type: ignore[no-untyped-def]
    with session_scope(url) as session:
        session.execute(update(Job).where(Job.id == job_id).values(**values))


def set_run(url: str, run_id: int, **values) -> None:  # type: ignore[no-untyped-def]
    with session_scope(url) as session:
        session.execute(update(Run).where(Run.id == run_id).values(**values))


# --- the claim -----------------------------------------------------------------------------------


def test_a_running_job_belongs_to_its_delivery_while_the_lease_is_renewed(database_url, make_run) -> None:
    (job_id,) = new_jobs(database_url, make_run(database_url), 1)
    assert claim(database_url, job_id, "first") == (Claim.run, 1)
    assert claim(database_url, job_id, "second") == (Claim.duplicate, 1)  # dropped, no attempt counted
    assert claim(database_url, job_id, "first") == (Claim.run, 2)  # its own message back: its pool died
    with session_scope(database_url) as session:
        assert not finish_job(session, job_id, JobStatus.done.value, delivery="second")
        assert renew_lease(session, job_id, "first") and holds_job(session, job_id, "first")

    set_job(database_url, job_id, lease_renewed_at=utcnow() - timedelta(seconds=LEASE_S + 1))
    assert claim(database_url, job_id, "second") == (Claim.run, 3)  # the lease lapsed: taken over
    with session_scope(database_url) as session:
        assert not renew_lease(session, job_id, "first") and not holds_job(session, job_id, "first")
        assert not finish_job(session, job_id, JobStatus.done.value, delivery="first")  # left to "second"
        assert session.get(Job, job_id).status == JobStatus.running.value
        assert finish_job(session, job_id, JobStatus.done.value, delivery="second")
    assert claim(database_url, job_id, "third") == (Claim.finished, 3)


def test_deliveries_of_one_job_at_once_run_it_once(database_url, make_run) -> None:
    (job_id,) = new_jobs(database_url, make_run(database_url), 1)
    barrier = threading.Barrier(6)

    def deliver(index: int) -> Claim:
        barrier.wait(timeout=10)
        return claim(database_url, job_id, f"delivery-{index}")[0]

    with ThreadPoolExecutor(6) as pool:
        claims = Counter(pool.map(deliver, range(6)))
    assert claims == {Claim.run: 1, Claim.duplicate: 5}


# --- the reconciler ------------------------------------------------------------------------------


@pytest.fixture
def settings(database_url: str, redis_url: str, tmp_path: Path, clean_environment) -> Settings:
    return Settings(database_url=database_url, broker_url=redis_url, workdir=tmp_path, worker_online_s=LEASE_S,
                    reconcile_grace_s=GRACE_S)


class BrokerSenders(Senders):
    """The worker's senders' shape, sending through a real producer to the settings' broker, each task to
    its queue (``queue_of_task``) as the worker's do."""

    def __init__(self, settings: Settings) -> None:
        producer = create_celery(settings)

        def send(task: str, argument: int, queue: str | None = None) -> None:
            producer.send_task(task, args=[argument], queue=queue or queue_of_task(task))

        super().__init__(job=lambda job_id, queue: send(RUN_JOB, job_id, queue),
                         plan=lambda run_id: send(PLAN_RUN, run_id), finalize=lambda run_id: send(FINALIZE_RUN, run_id),
                         delivery=lambda delivery_id: send(HANDLE_DELIVERY, delivery_id))


def stored_delivery(url: str, name: str, *, received_at: datetime, processed: bool = False) -> int:
    with session_scope(url) as session:
        stored = store_delivery(session, delivery_id=name, event="push", payload={}, decision={}, subject=None)
        assert stored is not None
        session.execute(update(Delivery).where(Delivery.id == stored).values(
            received_at=received_at, processed_at=utcnow() if processed else None))
        return stored


def messages_in(settings: Settings) -> Counter:
    """How many messages of each (queue, task, first argument) wait in Redis's cpu and control queues."""
    import redis

    with redis.Redis.from_url(settings.broker_url) as client:
        payloads = [(queue, json.loads(raw)) for queue in ("cpu", CONTROL_QUEUE) for raw in client.lrange(queue, 0, -1)]
    return Counter((queue, payload["headers"]["task"], json.loads(base64.b64decode(payload["body"]))[0][0])
                   for queue, payload in payloads)


@pytest.mark.integration
def test_the_reconciler_sends_again_only_what_the_broker_lost(settings: Settings, make_run) -> None:
    url, send = settings.database_url, BrokerSenders(settings)
    run = make_run(url)
    waiting, lost_message, fresh, lapsed, renewed = new_jobs(url, run, 5)
    old = utcnow() - LONG_AGO
    for job_id in (waiting, lost_message, lapsed, renewed):
        set_job(url, job_id, queued_at=old)
    send.job(waiting, "cpu")  # its message waits in the queue
    with session_scope(url) as session:  # the worker holding "lapsed" still beats: only its lease says it is gone
        record_heartbeat(session, name="cpu-1@here", host="here", device="cpu", queue="cpu")
    assert claim(url, lapsed, "gone")[0] is Claim.run and claim(url, renewed, "alive")[0] is Claim.run
    set_job(url, lapsed, lease_renewed_at=old, started_at=old)

    unplanned, planning = make_run(url), make_run(url)
    set_run(url, unplanned, created_at=old)
    set_run(url, planning, created_at=old)
    send.plan(planning)
    unfinalized = make_run(url)
    (finished,) = new_jobs(url, unfinalized, 1)
    set_job(url, finished, status=JobStatus.done.value, finished_at=old)
    # Deliveries: never announced (the broker was down), announced and waiting, announced by an API of
    # an earlier version (on the cpu queue, where a CPU job pool still takes it), just stored, acted on.
    unannounced, announced = stored_delivery(url, "d-1", received_at=old), stored_delivery(url, "d-2", received_at=old)
    earlier = stored_delivery(url, "d-5", received_at=old)
    send.delivery(announced)
    create_celery(settings).send_task(HANDLE_DELIVERY, args=[earlier], queue=EARLIER_CONTROL_QUEUE)
    stored_delivery(url, "d-3", received_at=utcnow())
    stored_delivery(url, "d-4", received_at=old, processed=True)

    reconcile = Reconciler(settings, send, held_credible_s=GRACE_S)
    assert reconcile() == Reconciled(lost_jobs=[lapsed], stranded_jobs=[lost_message], unplanned_runs=[unplanned],
                                     unfinalized_runs=[unfinalized], unhandled_deliveries=[unannounced])
    with session_scope(url, readonly=True) as session:
        jobs = {job.id: job for job in jobs_of_run(session, run)}
    assert jobs[lapsed].status == JobStatus.queued.value and jobs[lapsed].delivery is None
    assert jobs[lapsed].attempts == 1  # counted by its next claim
    assert jobs[renewed].status == JobStatus.running.value and jobs[fresh].status == JobStatus.queued.value

    assert not reconcile()  # what it sent now waits in the queue: nothing twice
    # Jobs and plans on the cpu queue, the rest on the control queue its own consumers serve.
    assert messages_in(settings) == {("cpu", RUN_JOB, waiting): 1, ("cpu", RUN_JOB, lost_message): 1,
                                     ("cpu", RUN_JOB, lapsed): 1, ("cpu", PLAN_RUN, unplanned): 1,
                                     ("cpu", PLAN_RUN, planning): 1, ("control", FINALIZE_RUN, unfinalized): 1,
                                     ("control", HANDLE_DELIVERY, unannounced): 1,
                                     ("control", HANDLE_DELIVERY, announced): 1, ("cpu", HANDLE_DELIVERY, earlier): 1}


@pytest.mark.integration
def test_a_message_a_worker_holds_counts_while_the_hold_is_credible(settings: Settings, make_run) -> None:
    url, send = settings.database_url, BrokerSenders(settings)
    (job_id,) = new_jobs(url, make_run(url), 1)
    set_job(url, job_id, queued_at=utcnow() - LONG_AGO)
    send.job(job_id, "cpu")
    with create_celery(settings).connection_for_read() as connection:
        connection.SimpleQueue("cpu", no_ack=False).get(timeout=5)  # taken, never acknowledged
        assert broker_tasks(settings, ["cpu"])[RUN_JOB, job_id] is not WAITING
        assert not Reconciler(settings, send, held_credible_s=GRACE_S)()
        # A hold older than credible: the worker that took it is presumed dead.
        assert Reconciler(settings, send, held_credible_s=0)().stranded_jobs == [job_id]


def test_the_embedded_broker_is_read_too(sqlite_url: str, tmp_path: Path, clean_environment) -> None:
    settings = Settings(database_url=sqlite_url, workdir=tmp_path)
    assert settings.broker_url.startswith("sqla+")
    BrokerSenders(settings).job(7, "cpu")
    BrokerSenders(settings).plan(8)
    BrokerSenders(settings).delivery(9)
    assert broker_tasks(settings, ["cpu"]) == {(RUN_JOB, 7): WAITING, (PLAN_RUN, 8): WAITING}
    assert broker_tasks(settings, [CONTROL_QUEUE]) == {(HANDLE_DELIVERY, 9): WAITING}
