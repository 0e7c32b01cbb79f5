"""Routing by device requirements, and waiting for a device (issue 10).

Pure: which device meets which requirements, and where the planner sends each scenario. Database:
the waiting reasons from real heartbeats of simulated GPUs (GRADCI_DEVICE_INVENTORY) and
``GET /api/runs/{id}``. End to end on PostgreSQL, Redis, the API over HTTP and real ``gradci worker``
processes (a CPU worker and one per simulated GPU): jobs land on the workers whose GPUs meet their
scenarios' needs, a run no device could ever run errors at planning, and a job no online worker
serves shows why in the API and ``gradci status``, then after GRADCI_DEVICE_WAIT its cells are skip
with that reason and the run finishes.
"""
from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select, update
from typer.testing import CliRunner

from gradci._testing.databases import emptied, flushed
from gradci._testing.processes import stop, wait_for
from gradci._testing.service import FINISHED, Service, jobs_of, results_of, running_service, start_worker
from gradci.cli.commands import app as cli
from gradci.scenarios.contract.matrix import Matrix
from gradci.scenarios.contract.requirements import DeviceOffer, Requirements, needs, requirements_of, unmet
from gradci.services.api.app import create_app
from gradci.services.db.jobs import store_jobs
from gradci.services.db.models import Job, Run, ScenarioCatalogEntry, Worker, utcnow
from gradci.services.db.session import session_scope
from gradci.services.db.waiting import overdue_runs, waiting_jobs
from gradci.services.db.workers import gpu_workers
from gradci.services.planner import GpuWorkers, JobSpec, PlanError, ScenarioInfo, divide_into_jobs, route
from gradci.services.settings import Settings
from gradci.worker.context import WorkerContext
from gradci.worker.device_discovery import parse_worker_device
from gradci.worker.heartbeat import Heartbeat
from tests.support.cells import TWO_GPUS
from tests.support.projects import project_repository

H100 = DeviceOffer("cuda", "90", TWO_GPUS[0]["memory_total"], "NVIDIA H100 80GB HBM3")
A100 = DeviceOffer("cuda", "80", TWO_GPUS[1]["memory_total"], "NVIDIA A100-SXM4-40GB")
BOTH_ONLINE = GpuWorkers(online=(H100, A100), known=(H100, A100))


def info(name: str, dtypes: tuple[str, ...] = ("float32",), **requirements: Any) -> ScenarioInfo:
    return ScenarioInfo(name=name, operator="gradient", dtypes=dtypes,
                        requirements=requirements_of(requirements or None, name))


SCENARIOS = (info("plain"), info("bf16", ("float32", "bfloat16")), info("needs90", min_capability="90"),
             info("needs60gb", min_memory="60GB"), info("needs100gb", min_memory="100GB"))


def plan(devices: list[str], scenarios=SCENARIOS, gpus: GpuWorkers = BOTH_ONLINE):
    return divide_into_jobs(scenarios, run_matrix=Matrix.of(devices=devices), file_matrix=Matrix(),
                    available_backends=["fd"], known_backends=["fd"], gpus=gpus)


# --- pure: requirements and routing ------------------------------------------------------------------


def test_a_device_meets_requirements_and_dtypes_or_says_why_not() -> None:
    big = Requirements(min_memory_bytes=60 * 10**9, min_capability="80")
    assert unmet(big, H100) is None
    assert unmet(big, A100) == "requires 60.0 GB of device memory; NVIDIA A100-SXM4-40GB has 42.9 GB"
    assert unmet(big, DeviceOffer.of_device("cpu")) == ("requires a GPU (compute capability 8.0 or newer, "
                                                        "60.0 GB of memory); cpu is not one")
    assert unmet(Requirements(), DeviceOffer.of_device("cpu"), "bfloat16") is None  # the CPU runs every dtype
    turing = DeviceOffer.of_device("cuda.sm75")
    assert unmet(Requirements(), turing, "float16") is None
    assert unmet(Requirements(), turing, "bfloat16") == ("requires compute capability 8.0 or newer for bfloat16; "
                                                         "cuda.sm75 has 7.5")
    assert unmet(Requirements(min_capability="100"), H100) == ("requires compute capability 10.0 or newer; "
                                                                 "NVIDIA H100 80GB HBM3 has 9.0")
    assert unmet(big, DeviceOffer.of_device("cuda")) is None  # any GPU: nothing known against it
    assert needs(Requirements(min_capability="75"), ["float16", "bfloat16"]).min_capability == "80"
    assert needs(Requirements(min_capability="90"), ["bfloat16"]).min_capability == "90"
    listed = ScenarioInfo.from_dict({"name": "s", "requirements": {"min_capability": "90", "min_memory_bytes": 10**9}})
    assert listed.requirements == Requirements(min_memory_bytes=10**9, min_capability="90")


def test_each_need_goes_to_the_lowest_capability_whose_workers_all_meet_it() -> None:
    queues = {job.scenarios: job.queue for job in plan(["cuda"]).jobs}
    assert queues == {("plain",): "cuda", ("bf16",): "cuda.sm80", ("needs90", "needs60gb"): "cuda.sm90",
                      ("needs100gb",): "cuda.mem100GB"}
    # A capability whose workers do not all have the memory is not chosen: a second, smaller sm90.
    small_h100 = DeviceOffer("cuda", "90", 20 * 10**9, "H100 PCIe 20GB")
    mixed = GpuWorkers(online=(H100, small_h100, A100), known=(H100, small_h100, A100))
    assert route(needs(Requirements(min_memory_bytes=60 * 10**9)), "cuda", mixed) == "cuda.mem60GB"
    assert route(needs(Requirements(min_memory_bytes=30 * 10**9)), "cuda", mixed) == "cuda.sm80"


def test_without_an_online_worker_routing_uses_the_workers_seen_then_the_need_itself() -> None:
    seen = GpuWorkers(online=(), known=(H100,))
    assert route(Requirements(min_capability="80"), "cuda", seen) == "cuda.sm90"
    assert route(Requirements(min_capability="80"), "cuda", GpuWorkers()) == "cuda.sm80"
    assert route(Requirements(min_memory_bytes=10**9), "cuda", GpuWorkers()) == "cuda.mem1GB"
    assert route(Requirements(), "cuda:1", BOTH_ONLINE) == "cuda"
    # A run's cuda.smXY is that capability's queue, unless its workers lack the memory.
    assert route(Requirements(min_capability="80"), "cuda.sm90", BOTH_ONLINE) == "cuda.sm90"
    assert route(Requirements(min_memory_bytes=60 * 10**9), "cuda.sm80", BOTH_ONLINE) == "cuda.sm80.mem60GB"


def test_cells_no_device_of_the_run_could_run_are_planned_as_skips() -> None:
    result = plan(["cpu", "cuda.sm80"])
    skipped = {(s.scenario, s.device): s.reason for s in result.skipped}
    assert skipped == {
        ("needs90", "cpu"): "requires a GPU (compute capability 9.0 or newer); cpu is not one",
        ("needs60gb", "cpu"): "requires a GPU (60.0 GB of memory); cpu is not one",
        ("needs100gb", "cpu"): "requires a GPU (100.0 GB of memory); cpu is not one",
        ("needs90", "cuda.sm80"): "requires compute capability 9.0 or newer; cuda.sm80 has 8.0",
    }  # plain and bf16 need nothing of the CPU, which runs bfloat16 too
    planned = {(job.device, name) for job in result.jobs for name in job.scenarios}
    assert not planned & set(skipped)
    assert ("cuda.sm80", "needs60gb") in planned  # memory is not known from a name: it may come online


def test_a_run_no_device_could_ever_run_is_a_plan_error() -> None:
    with pytest.raises(PlanError) as refused:
        plan(["cuda.sm80"], scenarios=(info("needs90", min_capability="90"),))
    assert str(refused.value) == ("no cell of this run can ever run: scenario 'needs90' requires compute "
                                  "capability 9.0 or newer; cuda.sm80 has 8.0")
    with pytest.raises(PlanError, match="'needs60gb' requires a GPU"):
        plan(["cpu"], scenarios=(info("needs60gb", min_memory="60GB"),))


# --- the database: who is online, and why a job waits ------------------------------------------------


def beat(settings: Settings, device: str) -> None:
    """One real heartbeat of a worker serving ``device`` (its simulated GPU's record included)."""
    Heartbeat(f"{device}-worker", WorkerContext(settings, parse_worker_device(device), f"{device}-worker")).beat()


def queued_jobs(database_url: str, make_run, queues: list[str]) -> int:
    run_id = make_run(database_url)
    with session_scope(database_url) as session:
        store_jobs(session, session.get(Run, run_id),
                   [JobSpec("fd", "cuda", queue, ("s",)) for queue in queues])
    return run_id


def reasons(database_url: str, run_id: int) -> dict[str, str]:
    with session_scope(database_url, readonly=True) as session:
        return {job.queue: job.reason for job in waiting_jobs(session, within_s=60, run_ids=[run_id])}


def test_why_a_job_waits_names_the_workers_online(database_url: str, make_run, two_gpus: Path,
                                                   tmp_path: Path) -> None:
    settings = Settings(database_url=database_url, workdir=tmp_path / "work")
    run_id = queued_jobs(database_url, make_run, ["cuda", "cuda.sm90", "cuda.mem100GB", "cpu"])
    assert reasons(database_url, run_id) == {
        "cuda": "waiting for a cuda worker; none online", "cuda.sm90": "waiting for a cuda.sm90 worker; none online",
        "cuda.mem100GB": "waiting for a cuda worker with 100 GB of memory; none online",
        "cpu": "waiting for a cpu worker; none online"}
    beat(settings, "cuda:1")  # the A100, sm80: it serves cuda and cuda.sm80
    assert reasons(database_url, run_id) == {
        "cuda.sm90": "waiting for a cuda.sm90 worker; online: cuda.sm80",
        "cuda.mem100GB": "waiting for a cuda worker with 100 GB of memory; online: cuda.sm80 (42.9 GB)",
        "cpu": "waiting for a cpu worker; none online"}
    beat(settings, "cuda:0")
    beat(settings, "cpu")
    assert reasons(database_url, run_id) == {"cuda.mem100GB": "waiting for a cuda worker with 100 GB of memory; "
                                                              "online: cuda.sm80 (42.9 GB), cuda.sm90 (85.5 GB)"}
    with session_scope(database_url, readonly=True) as session:
        gpus = gpu_workers(session, within_s=60)
    assert sorted((g.capability, g.memory_total) for g in gpus.online) == [("80", 42_949_672_960),
                                                                          ("90", 85_520_809_984)]
    # A worker that stopped beating is known, not online: it still says where its kind of job goes.
    with session_scope(database_url) as session:
        session.execute(update(Worker).where(Worker.name == "cuda:0-worker")
                        .values(last_heartbeat=utcnow() - timedelta(seconds=120)))
    with session_scope(database_url, readonly=True) as session:
        gpus = gpu_workers(session, within_s=60)
    assert [g.capability for g in gpus.online] == ["80"] and len(gpus.known) == 2
    assert reasons(database_url, run_id)["cuda.sm90"] == "waiting for a cuda.sm90 worker; online: cuda.sm80"


def test_the_api_shows_waiting_jobs_and_the_overdue_ones_are_found(database_url: str, make_run,
                                                                    tmp_path: Path) -> None:
    run_id = queued_jobs(database_url, make_run, ["cuda"])
    settings = Settings(database_url=database_url, broker_url="memory://", workdir=tmp_path / "work")
    with TestClient(create_app(settings)) as client:
        run = client.get(f"/api/runs/{run_id}").json()
        listed = client.get("/api/runs").json()["items"][0]
    assert [(w["queue"], w["reason"]) for w in run["waiting"]] == [("cuda", "waiting for a cuda worker; none online")]
    assert listed["waiting"] == run["waiting"] and run["counts"]["queued"] == 1
    with session_scope(database_url) as session:
        assert overdue_runs(session, within_s=60, wait_s=3600, limit=10) == []
        session.execute(update(Job).values(created_at=utcnow() - timedelta(seconds=3601)))
    with session_scope(database_url, readonly=True) as session:
        assert overdue_runs(session, within_s=60, wait_s=3600, limit=10) == [run_id]


# --- end to end: real workers, PostgreSQL, Redis, HTTP ------------------------------------------------

DEVICE_WAIT_S = 2


@pytest.fixture(scope="module")
def routing_service(postgres_database: str, redis_database: str,
                    tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    """``gradci api`` and a CPU worker on PostgreSQL and Redis checking ``tests/data/projects/routing``,
    whose jobs wait GRADCI_DEVICE_WAIT=2 s for a device, and the simulated inventory the GPU workers
    will use."""
    root = tmp_path_factory.mktemp("routing")
    sha = project_repository("routing", root / "repo")
    inventory = root / "gpus.json"
    inventory.write_text(json.dumps(TWO_GPUS))
    with running_service(emptied(postgres_database), flushed(redis_database), root / "work", root / "logs",
                         repo=root / "repo", sha=sha, concurrency=2, worker_heartbeat_s="1",
                         device_wait=str(DEVICE_WAIT_S), device_inventory=str(inventory)) as running:
        yield running


def finished(service: Service, run_id: int) -> dict[str, Any]:
    return wait_for(lambda: (run := service.run(run_id))["status"] in FINISHED and run, f"run {run_id} to finish")


@pytest.mark.integration
def test_a_job_no_online_worker_serves_says_why_then_its_cells_are_skipped(routing_service: Service) -> None:
    assert not [w for w in routing_service.client().get("/api/workers").json() if w["device"] != "cpu" and w["online"]], \
        "this test needs no GPU worker online"
    run_id = routing_service.submit(devices=["cuda"], scenarios=["plain/*"])
    run = wait_for(lambda: (run := routing_service.run(run_id))["waiting"] and run, "the job to wait", interval_s=0.1)
    reason = "waiting for a cuda worker; none online"
    assert [(w["queue"], w["reason"]) for w in run["waiting"]] == [("cuda", reason)]
    status = CliRunner().invoke(cli, ["status", str(run_id), "--server", routing_service.url], env={"GRADCI_API_TOKEN": routing_service.token})
    assert status.exit_code == 0, status.output
    assert f"1 job {reason} (since " in status.output
    run = finished(routing_service, run_id)
    cells = results_of(routing_service.database_url, run_id)
    # Its one cell skipped: the run checked nothing, and says so rather than passing.
    assert run["status"] == "skipped" and run["waiting"] == [] and len(cells) == 1
    assert reason in run["error_message"]
    assert (cells[0].status, cells[0].device, cells[0].backend) == ("skip", "cuda", "fd")
    assert cells[0].message == f"{reason} (gave up after {DEVICE_WAIT_S} s)"
    [job] = jobs_of(routing_service.database_url, run_id)
    assert (job.status, job.worker, job.message) == ("done", None, cells[0].message)


@pytest.mark.integration
def test_a_run_no_device_could_ever_run_errors_at_planning(routing_service: Service) -> None:
    run = finished(routing_service, routing_service.submit(devices=["cuda.sm80"], scenarios=["needs90/*"]))
    assert run["status"] == "error"
    assert run["error_message"] == ("no cell of this run can ever run: scenario 'needs90/gradient' requires "
                                    "compute capability 9.0 or newer; cuda.sm80 has 8.0")
    # On a CPU run, the GPU scenario's cells are skip with why, and the others run.
    run_id = routing_service.submit(devices=["cpu"], scenarios=["needs90/*", "plain/*"])
    assert finished(routing_service, run_id)["status"] == "passed"
    cells = {cell.scenario: cell for cell in results_of(routing_service.database_url, run_id)}
    assert cells["plain/gradient"].status == "pass"
    assert (cells["needs90/gradient"].status, cells["needs90/gradient"].message) == (
        "skip", "requires a GPU (compute capability 9.0 or newer); cpu is not one")
    with session_scope(routing_service.database_url, readonly=True) as session:
        catalog = {row.name: row.requirements for row in session.scalars(
            select(ScenarioCatalogEntry).where(ScenarioCatalogEntry.run_id == run_id))}
    assert catalog["needs90/gradient"] == {"min_capability": "90"} and catalog["plain/gradient"] == {}
    assert catalog["needs100gb/gradient"] == {"min_memory_bytes": 100 * 10**9}


@pytest.fixture
def gpu_workers_online(routing_service: Service) -> Iterator[None]:
    """`gradci worker --device cuda:0` (the H100, sm90) and `--device cuda:1` (the A100 40GB, sm80)."""
    workers = [start_worker(routing_service.env, routing_service.logs, device, None,
                            log=f"worker-{device.replace(':', '')}.log") for device in ("cuda:0", "cuda:1")]
    try:
        def both_online() -> bool:
            online = {w["device"] for w in routing_service.client().get("/api/workers").json() if w["online"]}
            return {"cuda:0", "cuda:1"} <= online
        wait_for(both_online, "both GPU workers' heartbeats", timeout_s=120)
        yield
    finally:
        for worker in workers:
            stop(worker)


@pytest.mark.integration
def test_jobs_go_to_the_workers_whose_gpus_meet_their_needs(routing_service: Service, gpu_workers_online: None) -> None:
    run_id = routing_service.submit(devices=["cuda"])
    run = finished(routing_service, run_id)
    # fd, the project's one backend, computes on the cpu: every cuda cell is a skip, and a run that
    # checked nothing says so rather than passing. Where the jobs went is what this test is about.
    assert run["status"] == "skipped", run
    jobs = {tuple(job.scenarios): job for job in jobs_of(routing_service.database_url, run_id)}
    assert {names: job.queue for names, job in jobs.items()} == {
        ("plain/gradient",): "cuda", ("bf16/gradient",): "cuda.sm80",
        ("needs90/gradient", "needs60gb/gradient"): "cuda.sm90", ("needs100gb/gradient",): "cuda.mem100GB"}
    ran_on = {names: (job.worker or "").split("-")[0] for names, job in jobs.items()}
    assert ran_on[("bf16/gradient",)] == "cuda1"  # the A100: capability 8.0 suffices for bfloat16
    assert ran_on[("needs90/gradient", "needs60gb/gradient")] == "cuda0"  # the H100: 9.0, 80 GB
    assert ran_on[("plain/gradient",)] in ("cuda0", "cuda1")
    cells = {(c.scenario, c.dtype): c for c in results_of(routing_service.database_url, run_id) if c.device == "cuda"}
    assert len(cells) == 6 and cells[("bf16/gradient", "bfloat16")].job_id == jobs[("bf16/gradient",)].id
    # No worker has 100 GB: that job waited, then its cell is skip with why.
    assert cells[("needs100gb/gradient", "float32")].message == (
        "waiting for a cuda worker with 100 GB of memory; online: cuda.sm80 (42.9 GB), cuda.sm90 (85.5 GB) "
        f"(gave up after {DEVICE_WAIT_S} s)")
