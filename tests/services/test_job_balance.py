"""Jobs cut by what their cells cost: a run's last job ends close to when its first worker goes idle.

The planner's weights come from the repository's last timed run, its jobs' wall time shared out
among their cells (real PostgreSQL and SQLite); with them, a run of skewed scenarios keeps every
worker busy where cutting by count leaves one long job running alone.
"""
from __future__ import annotations

import heapq
from datetime import timedelta

import pytest
from sqlalchemy import update

from gradci.scenarios.contract.matrix import Matrix
from gradci.services import planner
from gradci.services.db.cell_costs import last_timed_run, scenario_costs
from gradci.services.db.jobs import lock_run, store_jobs
from gradci.services.db.models import Job, JobStatus, Run, RunStatus, Worker, utcnow
from gradci.services.db.results import upsert_results
from gradci.services.db.session import session_scope
from gradci.services.db.workers import online_slots, record_heartbeat
from gradci.services.job_balance import Costs, cut_by_cost, longest_first, target_seconds
from gradci.services.planner import JobSpec, ScenarioInfo
from gradci.services.settings import Settings
from gradci.worker.context import WorkerContext
from gradci.worker.device_discovery import parse_worker_device
from gradci.worker.heartbeat import Heartbeat
from gradci.worker.plan_run import _costs as plan_run_costs
from gradci.worker.sources import RunRef


def finish_time(job_seconds: list[float], workers: int) -> float:
    """When the last of ``job_seconds`` ends, each worker taking the next job in order when it frees up."""
    free = [0.0] * workers
    for seconds in job_seconds:
        heapq.heappush(free, heapq.heappop(free) + seconds)
    return max(free)


def utilisation(job_seconds: list[float], workers: int) -> float:
    return sum(job_seconds) / workers / finish_time(job_seconds, workers)


# 25 heavy scenarios (a network family, 8 s each) listed first, then 300 light ones (0.1 s each): cut by
# count, the heavy ones make one 200 s job while the rest is done in 15 s.
HEAVY = [f"net/{i}" for i in range(25)]
LIGHT = [f"elementary/{i}" for i in range(300)]
SECONDS = {(name, "torch-rev", "cpu"): 8.0 for name in HEAVY} | {(name, "torch-rev", "cpu"): 0.1 for name in LIGHT}


def plan(costs: Costs | None) -> list[JobSpec]:
    scenarios = [ScenarioInfo(name) for name in HEAVY + LIGHT]
    return list(planner.divide_into_jobs(scenarios, run_matrix=Matrix(backends=("torch-rev",), devices=("cpu",)),
                                         file_matrix=Matrix(), available_backends=["torch-rev"],
                                         known_backends=["torch-rev"], chunk_size=25, costs=costs).jobs)


def true_seconds(jobs: list[JobSpec]) -> list[float]:
    return [sum(SECONDS[name, job.backend, "cpu"] for name in job.scenarios) for job in jobs]


@pytest.mark.parametrize("workers", [2, 4])
def test_jobs_cut_by_cost_keep_every_worker_busy_where_counts_do_not(workers):
    by_count = plan(None)
    by_cost = plan(Costs(SECONDS, workers=workers))
    assert utilisation(true_seconds(by_count), workers) < 0.6
    assert utilisation(true_seconds(by_cost), workers) >= 0.85
    # the same cells, each in exactly one job, and the heavy ones no longer together
    assert sorted(n for job in by_cost for n in job.scenarios) == sorted(HEAVY + LIGHT)
    assert max(sum(n in HEAVY for n in job.scenarios) for job in by_cost) < len(HEAVY)
    costs = [job.cost_s for job in by_cost]
    assert costs == sorted(costs, reverse=True), "longest first"
    assert costs == pytest.approx(true_seconds(by_cost))


def test_untimed_scenarios_cost_the_median_of_the_timed_and_no_timing_keeps_the_count_cut():
    costs = Costs({("a", "fd", "cpu"): 1.0, ("b", "fd", "cpu"): 3.0, ("c", "fd", "cpu"): 100.0})
    assert costs.of(["a", "new", "c"], "fd", "cpu") == [1.0, 50.5, 100.0]  # the median of its job-mates
    assert costs.of(["new"], "fd", "cpu") == [3.0]  # none timed beside it: the backend's median
    assert costs.of(["a"], "fd", "cuda:1") == [1.0]  # never timed on a GPU: the default
    assert Costs({}).of(["x"], "fd", "cpu") == [1.0]
    assert [len(job.scenarios) for job in plan(None)] == [25] * 13


def test_a_cut_respects_the_target_the_chunk_size_and_the_order():
    pieces = cut_by_cost(list("abcdef"), [1, 1, 5, 1, 1, 1], target_s=2.5, max_size=2)
    assert pieces == [(("a", "b"), 2), (("c",), 5), (("d", "e"), 2), (("f",), 1)]
    assert longest_first([2, 5, 2, 1]) == [1, 0, 2, 3]
    assert target_seconds(10.0, workers=4) == 2.0  # never under a job's own overhead
    assert target_seconds(800.0, workers=4) == 50.0
    with pytest.raises(ValueError):
        cut_by_cost(["a"], [1.0], 1.0, 0)


def test_costs_are_the_last_timed_runs_job_walls_shared_out_by_cell_timings(database_url, make_run, cell_factory):
    earlier = make_run(database_url, head_sha="b" * 40)
    started = utcnow() - timedelta(minutes=5)
    with session_scope(database_url) as session:
        job, other = store_jobs(session, lock_run(session, earlier),
                                [JobSpec("jax-rev", "cpu", "cpu", ("scenario_00001", "scenario_00002")),
                                 JobSpec("jax-rev", "cuda:1", "cuda", ("scenario_00003",))])
        cells = [cell_factory(1) | {"first_call_ms": 10.0, "reference_ms": 20.0, "time_ms": 0.0},
                 cell_factory(2) | {"first_call_ms": 60.0, "reference_ms": None, "time_ms": 30.0},
                 cell_factory(2, dtype="float32") | {"first_call_ms": 30.0, "reference_ms": 0.0, "time_ms": 0.0}]
        upsert_results(session, earlier, cells, job_id=job.id)
        upsert_results(session, earlier, [cell_factory(3, device="cuda:1") | {"first_call_ms": 5.0}], job_id=other.id)
        session.execute(update(Job).where(Job.id == job.id).values(
            status=JobStatus.done.value, started_at=started, finished_at=started + timedelta(seconds=15)))
        session.execute(update(Job).where(Job.id == other.id).values(
            status=JobStatus.done.value, started_at=started, finished_at=started + timedelta(seconds=4)))
        session.execute(update(Run).where(Run.id == earlier).values(status=RunStatus.passed.value))
    later = make_run(database_url, head_sha="c" * 40, base_sha="b" * 40)
    unrelated = make_run(database_url, head_sha="d" * 40)  # finished but without a finished job: not timed
    with session_scope(database_url) as session:
        session.execute(update(Run).where(Run.id == unrelated).values(status=RunStatus.passed.value))
        assert last_timed_run(session, session.get(Run, later)) == earlier
        assert last_timed_run(session, session.get(Run, earlier)) is None  # nothing timed before it
        costs = scenario_costs(session, earlier)
        # what plan_run weighs the later run's jobs with: these costs, shared by every online job slot
        weights = plan_run_costs(session, earlier, RunRef.of(session.get(Run, later)), 3)
        assert weights.workers == 3 and weights.seconds == costs
        # offered scenario_00001's reference, the run prices it without its 20 ms of 30: 15 s × 10/150
        assert scenario_costs(session, earlier, {"scenario_00001"})[("scenario_00001", "jax-rev", "cpu")] \
            == pytest.approx(1.0)
    # job 1: 15 s over 150 ms of cell timings: 30/150, 120/150
    assert costs == pytest.approx({("scenario_00001", "jax-rev", "cpu"): 3.0,
                                   ("scenario_00002", "jax-rev", "cpu"): 12.0,
                                   ("scenario_00003", "jax-rev", "cuda"): 4.0})


def test_a_pull_request_offered_references_prices_its_scenarios_without_them(database_url, make_run, cell_factory):
    """A pull request is offered the references its repository's default branch kept: its few re-run
    cells cost their own time, not their references'. Priced with them, one rule's cells look like
    several jobs, and each extra job waits for a runner of its own. A default-branch push computes (and
    keeps) its references: priced with them."""
    from gradci.services.db.carried_references import keep_references
    from gradci.services.db.runs import get_or_create_repository

    url = "https://github.com/Codertocat/Hello-World"
    with session_scope(database_url) as session:
        repository = get_or_create_repository(session, url, "Codertocat/Hello-World")
        base = Run(repository=repository, head_sha="b" * 40, trigger="push", status=RunStatus.passed.value)
        session.add(base)
        session.flush()
        [job] = store_jobs(session, lock_run(session, base.id),
                           [JobSpec("jax-rev", "cpu", "cpu", ("kept", "computed"))])
        upsert_results(session, base.id, [cell_factory(1) | {"scenario": "kept", "first_call_ms": 10.0,
                                                               "reference_ms": 90.0, "time_ms": 0.0},
                                           cell_factory(2) | {"scenario": "computed", "first_call_ms": 10.0,
                                                               "reference_ms": 90.0, "time_ms": 0.0}],
                       job_id=job.id)
        started = utcnow() - timedelta(minutes=1)
        session.execute(update(Job).where(Job.id == job.id).values(
            status=JobStatus.done.value, started_at=started, finished_at=started + timedelta(seconds=20)))
        keep_references(session, repository.id, base.id, "b" * 40, [("kept", "key", b"payload", {"files": {}})])
        pull = Run(repository=repository, head_sha="c" * 40, base_sha="b" * 40, trigger="webhook",
                   pr_number=7, carry={"base_run_id": base.id})
        push = Run(repository=repository, head_sha="d" * 40, base_sha="b" * 40, trigger="push",
                   carry={"base_run_id": base.id})
        session.add_all([pull, push])
        session.flush()
        for run in (pull, push):
            assert last_timed_run(session, run) == base.id
        offered = plan_run_costs(session, base.id, RunRef.of(pull), 2).seconds
        computed = plan_run_costs(session, base.id, RunRef.of(push), 2).seconds
    assert offered == pytest.approx({("kept", "jax-rev", "cpu"): 1.0, ("computed", "jax-rev", "cpu"): 10.0})
    assert computed == pytest.approx({("kept", "jax-rev", "cpu"): 10.0, ("computed", "jax-rev", "cpu"): 10.0})


def test_a_run_is_cut_for_every_online_job_slot_not_every_worker(database_url, tmp_path):
    """A worker of concurrency 8 runs eight jobs at once: cut into four jobs per worker, a skewed run
    would leave half of its processes idle. Its heartbeat says its concurrency; the cut counts it."""
    settings = Settings(database_url=database_url, workdir=tmp_path)
    Heartbeat("big", WorkerContext(settings, parse_worker_device("cpu"), "big", concurrency=8)).beat()
    Heartbeat("small", WorkerContext(settings, parse_worker_device("cpu"), "small")).beat()
    with session_scope(database_url) as session:
        record_heartbeat(session, name="old", host="h", device="cpu", queue="cpu", versions={"torch": "2.5"})
        record_heartbeat(session, name="gone", host="h", device="cpu", queue="cpu", versions={"concurrency": 4})
        session.execute(update(Worker).where(Worker.name == "gone").values(last_heartbeat=utcnow() - timedelta(hours=1)))
    with session_scope(database_url, readonly=True) as session:
        slots = online_slots(session, within_s=60)
    assert slots == 8 + 1 + 1  # a worker that names no concurrency counts as one; a silent one not at all
    # On one such worker, the skewed run of the test above: cut for one worker, one process runs two
    # long jobs while the others have finished; cut for its eight slots, all finish close together.
    assert utilisation(true_seconds(plan(Costs(SECONDS, workers=1))), 8) < 0.6
    assert utilisation(true_seconds(plan(Costs(SECONDS, workers=8))), 8) >= 0.85
