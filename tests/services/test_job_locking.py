"""Jobs of one run finishing at the same moment on PostgreSQL: one lock order, no deadlock.

A job's last write stores its final cells (each insert takes a key-share lock on the run row
through the foreign key) and then closes the job under the run's lock. Taken in that order by two
jobs at once, each waits for the other's key-share lock: PostgreSQL aborts one as a deadlock and
its last cells are lost. The writer takes the run's lock first.
"""
from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from gradci.services.db import queries
from gradci.services.db.jobs import jobs_of_run, lock_run, store_jobs
from gradci.services.db.models import JobStatus
from gradci.services.db.session import session_scope
from gradci.services.planner import JobSpec
from gradci.worker import job_execution
from gradci.worker.job_execution import JobRef, ResultWriter

pytestmark = pytest.mark.integration

JOBS = 6


def test_jobs_finishing_together_never_deadlock(postgres_url, make_run, cell_factory, monkeypatch) -> None:
    run_id = make_run(postgres_url)
    with session_scope(postgres_url) as session:
        run = lock_run(session, run_id)
        store_jobs(session, run, [JobSpec("jax-rev", "cpu", "cpu", (f"s{i}",)) for i in range(JOBS)])
    with session_scope(postgres_url) as session:
        refs = [JobRef.of(job) for job in jobs_of_run(session, run_id)]

    # Line every job up between storing its cells and closing itself, where the old order deadlocked.
    barrier = threading.Barrier(JOBS)
    close_job = job_execution.finish_job

    def finish_job_together(*args, **kwargs):
        try:
            barrier.wait(timeout=3)
        except threading.BrokenBarrierError:
            pass  # with the run locked first the others wait on the lock, not here
        return close_job(*args, **kwargs)

    monkeypatch.setattr(job_execution, "finish_job", finish_job_together)

    def finish(index: int) -> bool:
        writer = ResultWriter(postgres_url, refs[index])
        for cell in range(3):
            writer.add(cell_factory(index * 10 + cell))
        return writer.finish(JobStatus.done.value)

    with ThreadPoolExecutor(JOBS) as pool:
        last = list(pool.map(finish, range(JOBS)))  # a deadlock raises here
    assert sorted(last) == [False] * (JOBS - 1) + [True]  # exactly one job saw the run complete
    with session_scope(postgres_url) as session:
        assert {job.status for job in jobs_of_run(session, run_id)} == {JobStatus.done.value}
        assert sum(queries.cell_counts(session, [run_id])[run_id].values()) == JOBS * 3


