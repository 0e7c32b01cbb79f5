"""Faults on real processes: a worker killed with SIGKILL mid-job, Redis restarted without
persistence during a run, PostgreSQL restarted during a run, the same job delivered twice at once,
a plan and a finalisation whose messages were lost. Each run completes once the fault is gone, with
every cell stored exactly once; /api/health answers 503 — at once, never hanging — while a server is down.

Private PostgreSQL and Redis servers (``tests.support.faults``, the ``faulty_service`` fixture): the
shared ones are never touched.
Heartbeats, leases and the reconciler's grace are shortened through the settings so that recovery
takes seconds, as it takes minutes with the defaults.
"""
from __future__ import annotations

import time

import pytest
from sqlalchemy import delete, update

from gradci._testing.processes import wait_for
from gradci._testing.service import assert_each_cell_once, jobs_of, results_of
from gradci.services.db.models import Job, Result, Run, utcnow
from gradci.services.db.session import session_scope
from tests.support import faults
from tests.support.broker import send_task
from tests.support.faults import FaultyService, PrivatePostgres, PrivateRedis

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(faults.available() is not None, reason=str(faults.available()))]

SCENARIOS = 6  # tests/data/projects/faults: one job each, a run is 6 jobs, about a second apiece, two at a time
HEALTH_ANSWERS_WITHIN_S = 5.0


def worker_log(faulty_service: FaultyService) -> str:
    return (faulty_service.logs / "gradci.worker.log").read_text(errors="replace")


def started(faulty_service: FaultyService) -> int:
    """A run of every scenario, once its first cell is stored and jobs are running."""
    run_id = faulty_service.submit(scenarios="slow/*")

    def mid_run() -> bool:
        # Both at one poll: between one job's end and the next one's claim, none may be running.
        jobs = jobs_of(faulty_service.database_url, run_id)
        assert not jobs or any(job.status != "done" for job in jobs), f"the run ended before it was caught running: {jobs}"
        return bool(results_of(faulty_service.database_url, run_id)) and any(job.status == "running" for job in jobs)

    wait_for(mid_run, "a first cell stored while a job is running", interval_s=0.05)
    return run_id


def assert_complete(faulty_service: FaultyService, run_id: int, cells: int = SCENARIOS) -> None:
    run = faulty_service.wait_finished(run_id)
    results = results_of(faulty_service.database_url, run_id)
    assert_each_cell_once(results)
    assert len(results) == cells and {result.status for result in results} == {"pass"}
    assert {job.status for job in jobs_of(faulty_service.database_url, run_id)} == {"done"}
    assert run["status"] == "passed", run


def test_a_worker_killed_with_sigkill_mid_job(faulty_service: FaultyService) -> None:
    run_id = started(faulty_service)
    faulty_service.kill_worker()
    faulty_service.start_worker()  # as a supervisor would; the killed worker's jobs are not in any queue
    assert_complete(faulty_service, run_id)
    assert max(job.attempts for job in jobs_of(faulty_service.database_url, run_id)) >= 2
    assert "lost its worker: sent again" in worker_log(faulty_service)


def test_a_job_whose_worker_keeps_dying_gives_up_after_max_attempts(faulty_service: FaultyService) -> None:
    run_id = faulty_service.submit(scenarios="stuck/*")
    deliveries = []
    for attempt in (1, 2, 3):
        wait_for(lambda: any(job.status == "running" and job.attempts == attempt
                             for job in jobs_of(faulty_service.database_url, run_id)), f"attempt {attempt}", interval_s=0.1)
        deliveries.append(jobs_of(faulty_service.database_url, run_id)[0].delivery)
        faulty_service.kill_worker()
        faulty_service.start_worker()
    # A plan of one job runs it in the planning process (plan_run.run_alone); killed there, the job is
    # lost like any other and the reconciler sends it as a message of its own.
    assert deliveries[0].endswith("/job") and not any(d.endswith("/job") for d in deliveries[1:]), deliveries
    run = faulty_service.wait_finished(run_id)
    (job,) = jobs_of(faulty_service.database_url, run_id)
    assert job.status == "error" and job.attempts == 3 and "gave up after 3 attempts" in job.message
    (result,) = results_of(faulty_service.database_url, run_id)
    assert result.status == "error" and "gave up" in result.message
    assert run["status"] == "error" and "gave up" in run["error_message"]


def down_for(faulty_service: FaultyService, server: PrivateRedis | PrivatePostgres | None, seconds: float) -> None:
    """``server`` down for ``seconds``, then started again; all the while /api/health answers 503 at
    once, checked each second."""
    assert server is not None
    if isinstance(server, PrivateRedis):
        server.kill()  # every queued message is gone with it
    else:
        server.stop()
    try:
        down_until = time.monotonic() + seconds
        while True:
            status, took = faulty_service.health()
            assert status == 503 and took < HEALTH_ANSWERS_WITHIN_S
            time.sleep(1)
            if time.monotonic() >= down_until:
                break
    finally:
        server.start()


def test_redis_restarted_during_a_run(faulty_service: FaultyService) -> None:
    run_id = started(faulty_service)
    down_for(faulty_service, faulty_service.redis, seconds=1)
    assert_complete(faulty_service, run_id)
    assert "lost its message: sent again" in worker_log(faulty_service)


def test_postgres_restarted_during_a_run(faulty_service: FaultyService) -> None:
    run_id = started(faulty_service)
    down_for(faulty_service, faulty_service.postgres, seconds=10)
    assert_complete(faulty_service, run_id)
    assert "the database is unreachable" in worker_log(faulty_service)  # the running jobs waited with their cells


def test_a_job_taken_while_postgres_is_down_is_retried_not_acknowledged(faulty_service: FaultyService) -> None:
    run_id, job_id = rewound_run(faulty_service, "slow/3", keep_jobs=True)
    assert faulty_service.postgres is not None
    faulty_service.postgres.stop()
    try:
        send(faulty_service, "gradci.run_job", job_id)
        wait_for(lambda: "Retry in" in worker_log(faulty_service), "the failed claim to be retried", timeout_s=30)
    finally:
        faulty_service.postgres.start()
    assert_complete(faulty_service, run_id, cells=1)
    assert jobs_of(faulty_service.database_url, run_id)[0].attempts == 1  # the failed claim counted no attempt


def test_the_same_job_delivered_twice_at_once_runs_once(faulty_service: FaultyService) -> None:
    run_id, job_id = rewound_run(faulty_service, "slow/0", keep_jobs=True)
    for _ in range(2):  # two idle pool processes take one each
        send(faulty_service, "gradci.run_job", job_id)
    assert_complete(faulty_service, run_id, cells=1)
    assert jobs_of(faulty_service.database_url, run_id)[0].attempts == 1
    assert f"job {job_id} (run {run_id}, fd on cpu): duplicate" in worker_log(faulty_service)


def test_a_run_whose_plan_was_lost_is_planned_again(faulty_service: FaultyService) -> None:
    run_id, _ = rewound_run(faulty_service, "slow/1", keep_jobs=False)
    assert_complete(faulty_service, run_id, cells=1)
    assert f"run {run_id} lost its gradci.plan_run message" in worker_log(faulty_service)


def test_a_run_whose_finalisation_was_lost_is_finalised(faulty_service: FaultyService) -> None:
    run_id = faulty_service.submit(scenarios="slow/2")
    faulty_service.wait_finished(run_id)
    with session_scope(faulty_service.database_url) as session:  # every job done, finalize_run never came
        session.execute(update(Run).where(Run.id == run_id).values(status="running", finished_at=None, coverage=None))
    assert_complete(faulty_service, run_id, cells=1)
    assert f"run {run_id} lost its gradci.finalize_run message" in worker_log(faulty_service)


def rewound_run(faulty_service: FaultyService, scenario: str, *, keep_jobs: bool) -> tuple[int, int]:
    """(run, job) of a finished one-job run put back as it was before its job ran (``keep_jobs``)
    or before it was planned, with no message for it in the broker."""
    run_id = faulty_service.submit(scenarios=scenario)
    faulty_service.wait_finished(run_id)
    (job,) = jobs_of(faulty_service.database_url, run_id)
    with session_scope(faulty_service.database_url) as session:
        session.execute(delete(Result).where(Result.run_id == run_id))
        if keep_jobs:  # sent just now, as far as the reconciler's grace is concerned
            session.execute(update(Job).where(Job.id == job.id).values(
                status="queued", attempts=0, worker=None, delivery=None, finished_at=None, queued_at=utcnow()))
        else:
            session.execute(delete(Job).where(Job.run_id == run_id))
        session.execute(update(Run).where(Run.id == run_id).values(
            status="running" if keep_jobs else "queued", finished_at=None, coverage=None))
    return run_id, job.id


def send(faulty_service: FaultyService, task: str, argument: int) -> None:
    send_task(faulty_service.broker_url, task, argument)
