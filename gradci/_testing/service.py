"""A gradci service as real processes, started through the production entry points.

The processes are ``gradci api`` (the REST API and the dashboard under uvicorn) and ``gradci worker
--device ...``, configured only through GRADCI_* variables, on the database and broker the caller
gives (PostgreSQL and Redis, or private servers a fault test restarts). Also what tests read back of
a run: its results and jobs.
"""
from __future__ import annotations

import dataclasses
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import select

from gradci._testing.processes import RUN_TIMEOUT_S, free_port, service_env, spawn, stop, wait_for
from gradci.services.db.models import Job, Result
from gradci.services.db.session import session_scope

TOKEN = "integration-token"
FINISHED = ("passed", "failed", "error", "cancelled", "skipped")
GRADCI = [sys.executable, "-P", "-m", "gradci"]  # -P: no folder it starts in shadows gradci


def start_api(env: dict[str, str], logs: Path, port: int, *options: str) -> subprocess.Popen[bytes]:
    """``gradci api --port PORT`` (API and dashboard), output in ``logs/api.log``."""
    return spawn([*GRADCI, "api", "--port", str(port), *options], env, logs / "api.log")


def start_worker(env: dict[str, str], logs: Path, device: str = "cpu", concurrency: int | None = 1, *,
                 log: str = "gradci.worker.log", options: tuple[str, ...] = ()) -> subprocess.Popen[bytes]:
    """Start ``gradci worker --device DEVICE [--concurrency N] [options]``.

    Its output is appended to ``logs/<log>``.
    ``concurrency=None``: the worker's default (CPU cores up to 4; 1 per GPU).
    """
    argv = [*GRADCI, "worker", "--device", device]
    if concurrency is not None:
        argv += ["--concurrency", str(concurrency)]
    return spawn([*argv, *options], env, logs / log)


def health(url: str) -> dict[str, Any] | None:
    try:
        return httpx.get(f"{url}/api/health", timeout=5).json()
    except (httpx.HTTPError, ValueError):
        return None


def api_answers(url: str) -> bool:
    """The API serves its schema (not a query: a later request may want to be the first that reads)."""
    try:
        return httpx.get(f"{url}/openapi.json", timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


def workers_online(url: str, device: str = "cpu") -> bool:
    """The API answers and sees a ``device`` worker's heartbeat."""
    answer = health(url) or {}
    return answer.get("workers_online", {}).get(device, 0) > 0


@dataclasses.dataclass
class Service:
    """A started service: its API's URL, its settings, and the repository (at ``sha``) runs check by default."""
    url: str
    database_url: str
    broker_url: str
    repo: Path | None
    sha: str | None
    workdir: Path
    logs: Path
    env: dict[str, str]
    api: subprocess.Popen[bytes] | None = None
    worker: subprocess.Popen[bytes] | None = None
    token: str = TOKEN

    def client(self) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {self.token}"}, timeout=30)

    def submit(self, **fields: Any) -> int:
        """POST /api/runs (this service's repository and sha unless ``fields`` name others); the run's id."""
        body = {"repo": str(self.repo), "sha": self.sha, **fields}
        with self.client() as client:
            response = client.post("/api/runs", json=body)
        assert response.status_code == 201, response.text
        return response.json()["id"]

    def run(self, run_id: int) -> dict[str, Any]:
        with self.client() as client:
            return client.get(f"/api/runs/{run_id}").json()

    def wait_finished(self, run_id: int, timeout_s: float = RUN_TIMEOUT_S) -> dict[str, Any]:
        try:
            return wait_for(lambda: (run := self.run(run_id))["status"] in FINISHED and run,
                            f"run {run_id} to finish", timeout_s=timeout_s)
        except AssertionError:
            print(self.log("gradci.worker.log")[-6000:])
            raise

    def log(self, name: str) -> str:
        path = self.logs / name
        return path.read_text(errors="replace") if path.exists() else ""

    def start_worker(self, device: str = "cpu", concurrency: int | None = 1) -> subprocess.Popen[bytes]:
        """Another ``gradci worker`` on this service's settings (the one ``worker`` names if none runs)."""
        process = start_worker(self.env, self.logs, device, concurrency)
        if self.worker is None or self.worker.poll() is not None:
            self.worker = process
        return process


@contextmanager
def running_service(database_url: str, broker_url: str, workdir: Path, logs: Path, *, repo: Path | None = None,
                    sha: str | None = None, concurrency: int | None = 1, worker: bool = True,
                    token: str = TOKEN, service_class: type[Service] = Service,
                    **settings: str) -> Iterator[Service]:
    """``gradci api`` and one ``gradci worker``, running until the block exits.

    The worker (unless ``worker=False``) is ``gradci worker --device cpu --concurrency N``. Both run on
    ``database_url`` and ``broker_url``, with ``GRADCI_<KEY>`` set from ``settings`` (``read_access``
    "local" unless given: the service's own reads are open to requests on loopback); ready once the
    API sees the worker (or, with no worker, answers). Both are stopped on exit (the worker the
    ``Service`` names then: a test may have replaced it). ``service_class``: a subclass to yield.
    """
    workdir.mkdir(parents=True, exist_ok=True)
    logs.mkdir(parents=True, exist_ok=True)
    # Read as gradci up's local user reads (everything, on loopback) unless a test says who reads.
    settings.setdefault("read_access", "local")
    # Spare runners (on in production) import torch and jax in the background after each pull request's
    # task: off here, so that a suite of many services keeps its cores for its checks; their own tests
    # and the benches turn them on.
    settings.setdefault("runner_spare", "false")
    env = service_env(database_url=database_url, broker_url=broker_url, workdir=str(workdir), api_token=token,
                      **settings)
    port = free_port()
    service = service_class(url=f"http://127.0.0.1:{port}", database_url=database_url, broker_url=broker_url, repo=repo,
                      sha=sha, workdir=workdir, logs=logs, env=env, token=token)
    try:
        service.api = start_api(env, logs, port)
        if worker:
            service.start_worker("cpu", concurrency)
            wait_for(lambda: workers_online(service.url), "the API and a cpu worker", timeout_s=90)
        else:
            wait_for(lambda: api_answers(service.url), "the API to answer", timeout_s=90)
        yield service
    finally:
        if service.worker is not None:
            stop(service.worker)
        if service.api is not None:
            stop(service.api)


def results_of(database_url: str, run_id: int) -> list[Result]:
    with session_scope(database_url, readonly=True) as session:
        return list(session.scalars(select(Result).where(Result.run_id == run_id).order_by(Result.id)))


def jobs_of(database_url: str, run_id: int) -> list[Job]:
    with session_scope(database_url, readonly=True) as session:
        return list(session.scalars(select(Job).where(Job.run_id == run_id).order_by(Job.id)))


def assert_each_cell_once(results: list[Result]) -> None:
    keys = [(r.scenario, r.backend, r.device, r.dtype) for r in results]
    assert len(keys) == len(set(keys)), "a cell was stored twice"
