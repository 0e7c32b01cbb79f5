"""Faults on real processes: a worker killed with SIGKILL mid-job, Redis restarted without
persistence during a run, PostgreSQL restarted during a run, the same job delivered twice at once,
a plan and a finalisation whose messages were lost. Each run completes once the fault is gone, with
every cell stored exactly once; /api/health answers 503 — at once, never hanging — while a server is down.

Private PostgreSQL and Redis servers (``tests.fault_harness``): the shared ones are never touched.
Heartbeats, leases and the reconciler's grace are shortened through the settings so that recovery
takes seconds, as it takes minutes with the defaults.
"""
from __future__ import annotations

import textwrap
import time
from collections.abc import Iterator

import pytest
from celery import Celery
from sqlalchemy import delete, update

from gradci.services.db.models import Job, Result, Run, utcnow
from gradci.services.db.session import session_scope
from tests import fault_harness
from tests.fault_harness import FaultyService, faulty_service
from tests.test_integration import assert_each_cell_once, git, jobs_of, results_of, wait_for

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(fault_harness.available() is not None, reason=str(fault_harness.available()))]

SCENARIOS = 6  # one job each: a run is 6 jobs, about a second apiece, two at a time
HEALTH_ANSWERS_WITHIN_S = 5.0

GRADCI_TOML = '''
[scenarios]
modules = ["fault_scenarios"]

[matrix]
backends = ["fd"]
dtypes = ["float64"]
'''

SCENARIOS_MODULE = f'''
import time

from gradci import Scenario
from gradci.scenarios.authoring.namespace import namespace


def slow(x):
    time.sleep(0.1)  # a job of about a second: long enough to be caught running
    return namespace(x).sum(x ** 3 - 2 * x)


def stuck(x):
    time.sleep(50)  # killed long before the cell timeout: a job whose worker keeps dying
    return namespace(x).sum(x ** 3)


def scenarios():
    return ([Scenario(f"slow/{{i}}", "derivative", slow, 0.3 + i / 10) for i in range({SCENARIOS})]
            + [Scenario("stuck/0", "derivative", stuck, 0.5)])
'''


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FaultyService]:
    repo = tmp_path_factory.mktemp("fault-project")
    git(repo, "init", "-q", "-b", "main")
    (repo / "gradci.toml").write_text(GRADCI_TOML)
    (repo / "fault_scenarios.py").write_text(textwrap.dedent(SCENARIOS_MODULE))
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "scenarios")
    with faulty_service(repo, git(repo, "rev-parse", "HEAD"), job_chunk_size="1", cell_timeout_s="60",
                        max_job_attempts="3", worker_heartbeat_s="0.5", worker_online_s="3",
                        reconcile_grace_s="3") as running:
        yield running


def worker_log(service: FaultyService) -> str:
    return (service.logs / "gradci.worker.log").read_text(errors="replace")


def started(service: FaultyService) -> int:
    """A run of every scenario, once its first cell is stored and jobs are running."""
    run_id = service.submit(scenarios="slow/*")
    wait_for(lambda: results_of(service.database_url, run_id), "a first cell", interval_s=0.1)
    assert any(job.status == "running" for job in jobs_of(service.database_url, run_id)), service.run(run_id)
    return run_id


def assert_complete(service: FaultyService, run_id: int, cells: int = SCENARIOS) -> None:
    run = service.wait_finished(run_id)
    results = results_of(service.database_url, run_id)
    assert_each_cell_once(results)
    assert len(results) == cells and {result.status for result in results} == {"pass"}
    assert {job.status for job in jobs_of(service.database_url, run_id)} == {"done"}
    assert run["status"] == "passed", run


def test_a_worker_killed_with_sigkill_mid_job(service: FaultyService) -> None:
    run_id = started(service)
    service.kill_worker()
    service.start_worker()  # as a supervisor would; the killed worker's jobs are not in any queue
    assert_complete(service, run_id)
    assert max(job.attempts for job in jobs_of(service.database_url, run_id)) >= 2
    assert "lost its worker: sent again" in worker_log(service)


def test_a_job_whose_worker_keeps_dying_gives_up_after_max_attempts(service: FaultyService) -> None:
    run_id = service.submit(scenarios="stuck/*")
    for attempt in (1, 2, 3):
        wait_for(lambda: any(job.status == "running" and job.attempts == attempt
                             for job in jobs_of(service.database_url, run_id)), f"attempt {attempt}", interval_s=0.1)
        service.kill_worker()
        service.start_worker()
    run = service.wait_finished(run_id)
    (job,) = jobs_of(service.database_url, run_id)
    assert job.status == "error" and job.attempts == 3 and "gave up after 3 attempts" in job.message
    (result,) = results_of(service.database_url, run_id)
    assert result.status == "error" and "gave up" in result.message
    assert run["status"] == "error" and "gave up" in run["error_message"]


def test_redis_restarted_during_a_run(service: FaultyService) -> None:
    run_id = started(service)
    assert service.redis is not None
    service.redis.kill()  # every queued message is gone with it
    try:
        status, took = service.health()
        assert status == 503 and took < HEALTH_ANSWERS_WITHIN_S
        time.sleep(1)
    finally:
        service.redis.start()
    assert_complete(service, run_id)
    assert "lost its message: sent again" in worker_log(service)


def test_postgres_restarted_during_a_run(service: FaultyService) -> None:
    run_id = started(service)
    assert service.postgres is not None
    service.postgres.stop()
    try:
        down_until = time.monotonic() + 10
        while time.monotonic() < down_until:
            status, took = service.health()
            assert status == 503 and took < HEALTH_ANSWERS_WITHIN_S
            time.sleep(1)
    finally:
        service.postgres.start()
    assert_complete(service, run_id)
    assert "the database is unreachable" in worker_log(service)  # the running jobs waited with their cells


def test_a_job_taken_while_postgres_is_down_is_retried_not_acknowledged(service: FaultyService) -> None:
    run_id, job_id = rewound_run(service, "slow/3", keep_jobs=True)
    assert service.postgres is not None
    service.postgres.stop()
    try:
        send(service, "gradci.run_job", job_id)
        wait_for(lambda: "Retry in" in worker_log(service), "the failed claim to be retried", timeout_s=30)
    finally:
        service.postgres.start()
    assert_complete(service, run_id, cells=1)
    assert jobs_of(service.database_url, run_id)[0].attempts == 1  # the failed claim counted no attempt


def test_the_same_job_delivered_twice_at_once_runs_once(service: FaultyService) -> None:
    run_id, job_id = rewound_run(service, "slow/0", keep_jobs=True)
    for _ in range(2):  # two idle pool processes take one each
        send(service, "gradci.run_job", job_id)
    assert_complete(service, run_id, cells=1)
    assert jobs_of(service.database_url, run_id)[0].attempts == 1
    assert f"job {job_id} (run {run_id}, fd on cpu): duplicate" in worker_log(service)


def test_a_run_whose_plan_was_lost_is_planned_again(service: FaultyService) -> None:
    run_id, _ = rewound_run(service, "slow/1", keep_jobs=False)
    assert_complete(service, run_id, cells=1)
    assert f"run {run_id} lost its gradci.plan_run message" in worker_log(service)


def test_a_run_whose_finalisation_was_lost_is_finalised(service: FaultyService) -> None:
    run_id = service.submit(scenarios="slow/2")
    service.wait_finished(run_id)
    with session_scope(service.database_url) as session:  # every job done, finalize_run never came
        session.execute(update(Run).where(Run.id == run_id).values(status="running", finished_at=None, coverage=None))
    assert_complete(service, run_id, cells=1)
    assert f"run {run_id} lost its gradci.finalize_run message" in worker_log(service)


def rewound_run(service: FaultyService, scenario: str, *, keep_jobs: bool) -> tuple[int, int]:
    """(run, job) of a finished one-job run put back as it was before its job ran (``keep_jobs``)
    or before it was planned, with no message for it in the broker."""
    run_id = service.submit(scenarios=scenario)
    service.wait_finished(run_id)
    (job,) = jobs_of(service.database_url, run_id)
    with session_scope(service.database_url) as session:
        session.execute(delete(Result).where(Result.run_id == run_id))
        if keep_jobs:  # sent just now, as far as the reconciler's grace is concerned
            session.execute(update(Job).where(Job.id == job.id).values(
                status="queued", attempts=0, worker=None, delivery=None, finished_at=None, queued_at=utcnow()))
        else:
            session.execute(delete(Job).where(Job.run_id == run_id))
        session.execute(update(Run).where(Run.id == run_id).values(
            status="running" if keep_jobs else "queued", finished_at=None, coverage=None))
    return run_id, job.id


def send(service: FaultyService, task: str, argument: int) -> None:
    sender = Celery(broker=service.broker_url)
    try:
        sender.send_task(task, args=[argument], queue="cpu")
    finally:
        sender.close()
