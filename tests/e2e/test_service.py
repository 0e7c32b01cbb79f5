"""The service end to end: real PostgreSQL, Redis, API over HTTP (uvicorn) and `gradci worker`
processes, on a local git repository with scenarios; then the same path embedded (`gradci up`,
SQLite and the SQLite broker transport). No mock of any of them, no eager Celery.

Each test session uses a PostgreSQL database of its own (conftest's ``postgres_database``) and a
Redis database number it claims, so it collides neither with other test files nor other sessions.
"""
from __future__ import annotations

import dataclasses
import inspect
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from datetime import timedelta
from typing import Any

import httpx
import pytest
from sqlalchemy import select

from gradci.services.db.models import Job, Result, Run, ScenarioCatalogEntry, StoredReport, Worker, utcnow
from gradci.services.db.session import dispose_engine, session_scope
from tests import planted
from tests.conftest import emptied

pytestmark = pytest.mark.integration

REPO_ROOT = Path(__file__).resolve().parent.parent
TOKEN = "integration-token"
REDIS_BASE = os.environ.get("GRADCI_TEST_REDIS_URL", "redis://127.0.0.1:6379/13").rsplit("/", 1)[0]
REDIS_CLAIMABLE = range(1, 13)  # conftest's fixtures use 13; 0 holds the claims
RUN_TIMEOUT_S = 120

SCENARIOS_MODULE = '''
import os
import signal
import time

import numpy as np

from gradci import Scenario
from gradci.scenarios.authoring.namespace import namespace


def poly(x):
    xp = namespace(x)
    return xp.sum(x ** 3 - 2 * x)


def trig(x):
    xp = namespace(x)
    return xp.sum(xp.sin(x) * xp.cos(x))


def tanh(x):
    xp = namespace(x)
    return xp.sum(xp.tanh(x))


def segfault(x):
    os.kill(os.getpid(), signal.SIGSEGV)


def slow(x):
    time.sleep(0.02)
    return poly(x)


def one_element_wrong(x):
    # 1% in one element of 2000: hidden below float32 probes, found only by comparing forward mode's
    # result with reverse mode's, which run in different jobs of the service.
    import torch

    scale = torch.ones_like(x)
    scale[7] = 1.01
    return scale


def tanh_with_a_wrong_jvp(x):
    import torch

    return torch_elementwise(torch.tanh, lambda z: 1 - torch.tanh(z) ** 2, jvp_scale=one_element_wrong)(x).sum()


def scenarios():
    x = np.array([0.3, -0.2, 0.7])
    made = [
        Scenario("culprit/tanh-jvp", "gradient", {"numpy": lambda x: np.sum(np.tanh(x)),
                                                  "torch": tanh_with_a_wrong_jvp},
                 np.linspace(-1, 1, 2000), dtypes=("float32",)),
        Scenario("ok/poly", "gradient", poly, x),
        Scenario("ok/trig", "gradient", trig, x),
        Scenario("ok/tanh", "gradient", tanh, x, dtypes=("float64",)),
        Scenario("crash/segfault", "gradient", segfault, x),
    ]
    return made + [Scenario(f"slow/{i}", "gradient", slow, x) for i in range(6)]
''' + textwrap.dedent(inspect.getsource(planted.torch_elementwise))  # a checkout's runner cannot import tests/

GRADCI_TOML = '''
[scenarios]
modules = ["gradci_scenarios"]

[matrix]
backends = ["fd", "torch-rev"]
dtypes = ["float64", "float32"]
'''


# --- helpers ------------------------------------------------------------------------------------


def wait_for(predicate: Callable[[], Any], what: str, timeout_s: float = RUN_TIMEOUT_S, interval_s: float = 0.3) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(interval_s)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"}
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True,
                          env=env).stdout.strip()


def service_env(**gradci: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("GRADCI_")}
    env.update({f"GRADCI_{key.upper()}": value for key, value in gradci.items()})
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    return env


def spawn(argv: list[str], env: dict[str, str], log: Path, cwd: Path | None = None) -> subprocess.Popen[bytes]:
    with open(log, "ab") as output:
        return subprocess.Popen(argv, env=env, cwd=cwd or REPO_ROOT, stdout=output, stderr=subprocess.STDOUT,
                                start_new_session=True)


def stop(process: subprocess.Popen[bytes], grace_s: float = 10) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait()


@dataclasses.dataclass
class Service:
    url: str
    database_url: str
    broker_url: str
    repo: Path
    sha: str
    workdir: Path
    logs: Path
    env: dict[str, str]
    worker: subprocess.Popen[bytes] | None = None

    def client(self) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30)

    def submit(self, **fields: Any) -> int:
        with self.client() as client:
            response = client.post("/api/runs", json={"repo": str(self.repo), "sha": self.sha, **fields})
        assert response.status_code == 201, response.text
        return response.json()["id"]

    def run(self, run_id: int) -> dict[str, Any]:
        with self.client() as client:
            return client.get(f"/api/runs/{run_id}").json()

    def wait_finished(self, run_id: int) -> dict[str, Any]:
        try:
            return wait_for(lambda: (run := self.run(run_id))["status"] in ("passed", "failed", "error", "cancelled")
                            and run, f"run {run_id} to finish")
        except AssertionError:
            print(self.logs.joinpath("gradci.worker.log").read_text()[-6000:])
            raise

    def start_worker(self) -> None:
        self.worker = spawn([sys.executable, "-m", "gradci", "worker", "--device", "cpu", "--concurrency", "1"],
                            self.env, self.logs / "gradci.worker.log")


def results_of(database_url: str, run_id: int) -> list[Result]:
    with session_scope(database_url, readonly=True) as session:
        return list(session.scalars(select(Result).where(Result.run_id == run_id).order_by(Result.id)))


def jobs_of(database_url: str, run_id: int) -> list[Job]:
    with session_scope(database_url, readonly=True) as session:
        return list(session.scalars(select(Job).where(Job.run_id == run_id).order_by(Job.id)))


def assert_each_cell_once(results: list[Result]) -> None:
    keys = [(r.scenario, r.backend, r.device, r.dtype) for r in results]
    assert len(keys) == len(set(keys)), "a cell was stored twice"


# --- fixtures -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def redis_broker() -> Iterator[str]:
    """A Redis database number no other test session uses right now (claimed in database 0)."""
    import redis

    claims = redis.Redis.from_url(f"{REDIS_BASE}/0", socket_connect_timeout=3)
    try:
        claims.ping()
    except redis.ConnectionError as exc:
        pytest.skip(f"Redis is not reachable at {REDIS_BASE}: {exc}")
    number = next((n for n in REDIS_CLAIMABLE if claims.set(f"gradci-test-claim:{n}", os.getpid(), nx=True, ex=3600)),
                  None)
    if number is None:
        pytest.skip("every Redis test database is claimed by another session")
    url = f"{REDIS_BASE}/{number}"
    redis.Redis.from_url(url).flushdb()
    try:
        yield url
    finally:
        redis.Redis.from_url(url).flushdb()
        claims.delete(f"gradci-test-claim:{number}")
        claims.close()


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A git repository with a gradci.toml and scenarios: (path, head sha)."""
    root = tmp_path_factory.mktemp("project")
    git(root, "init", "-q", "-b", "main")
    (root / "gradci.toml").write_text(GRADCI_TOML)
    (root / "gradci_scenarios.py").write_text(textwrap.dedent(SCENARIOS_MODULE))
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "scenarios")
    return root, git(root, "rev-parse", "HEAD")


@pytest.fixture(scope="module")
def service(postgres_database: str, redis_broker: str, project: tuple[Path, str],
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    workdir, logs = tmp_path_factory.mktemp("work"), tmp_path_factory.mktemp("logs")
    env = service_env(database_url=emptied(postgres_database), broker_url=redis_broker, workdir=str(workdir),
                      api_token=TOKEN, job_chunk_size="2", cell_timeout_s="60", max_job_attempts="3",
                      worker_heartbeat_s="1")
    port = free_port()
    api = spawn([sys.executable, "-m", "uvicorn", "--factory", "gradci.services.api.app:create_app", "--host", "127.0.0.1",
                 "--port", str(port)], env, logs / "api.log")
    the_service = Service(url=f"http://127.0.0.1:{port}", database_url=postgres_database, broker_url=redis_broker,
                          repo=project[0], sha=project[1], workdir=workdir, logs=logs, env=env)
    the_service.start_worker()
    try:
        wait_for(lambda: _healthy(the_service.url), "the API and a cpu worker", timeout_s=90)
        yield the_service
    finally:
        stop(api)
        if the_service.worker is not None:
            stop(the_service.worker)


def _healthy(url: str) -> bool:
    try:
        health = httpx.get(f"{url}/api/health", timeout=5).json()
    except (httpx.HTTPError, ValueError):
        return False
    return health.get("status") == "ok" and health.get("workers_online", {}).get("cpu", 0) > 0


# --- Postgres + Redis ---------------------------------------------------------------------------


def test_a_run_lands_every_cell_exactly_once(service: Service) -> None:
    run_id = service.submit(scenarios=["ok/*", "crash/*"])
    run = service.wait_finished(run_id)
    results = results_of(service.database_url, run_id)
    assert_each_cell_once(results)
    # 4 scenarios × 2 backends (file [matrix]) × 2 dtypes
    assert len(results) == 16
    by_status: dict[str, set[tuple[str, str, str]]] = {}
    for r in results:
        by_status.setdefault(r.status, set()).add((r.scenario, r.backend, r.dtype))
    # The segfault is contained to its own cells; the job went on with the next scenarios.
    assert by_status["error"] == {("crash/segfault", b, d) for b in ("fd", "torch-rev") for d in ("float64", "float32")}
    assert all("SIGSEGV" in r.message for r in results if r.status == "error")
    # ok/tanh declares float64 only; the fd backend computes in float64 only.
    assert by_status["skip"] == {("ok/tanh", "torch-rev", "float32"), ("ok/tanh", "fd", "float32"),
                                 ("ok/poly", "fd", "float32"), ("ok/trig", "fd", "float32")}
    assert len(by_status["pass"]) == 8
    assert run["status"] == "failed"
    assert run["counts"]["pass"] == 8 and run["counts"]["error"] == 4 and run["counts"]["skip"] == 4
    assert run["coverage"] == pytest.approx(100 * 8 / 12)
    assert run["head_sha"] == service.sha and run["finished_at"]
    assert all(r.fingerprint for r in results)
    jobs = jobs_of(service.database_url, run_id)
    assert len(jobs) == 4 and {j.status for j in jobs} == {"done"} and {j.attempts for j in jobs} == {1}
    with session_scope(service.database_url, readonly=True) as session:
        catalog = session.scalars(select(ScenarioCatalogEntry).where(ScenarioCatalogEntry.run_id == run_id)).all()
        stored_report = session.get(StoredReport, run_id).report
        workers = session.scalars(select(Worker)).all()
    assert len(catalog) == 11 and all(entry.fingerprint for entry in catalog)
    assert stored_report["totals"]["head"]["pass"] == 8  # kept when the run was finalised
    assert any(w.device == "cpu" and w.versions.get("python") and w.versions.get("gradci") for w in workers)
    assert {j.worker for j in jobs} <= {w.name for w in workers}  # jobs name the worker that heartbeats


def test_forward_and_reverse_jobs_are_compared_and_only_the_wrong_mode_fails(service: Service) -> None:
    # Each backend is a job of its own; the cells still meet the other mode's, as in `gradci check`.
    run_id = service.submit(scenarios="culprit/*", backends=["torch-rev", "torch-func-fwd"])
    service.wait_finished(run_id)
    results = {r.backend: r for r in results_of(service.database_url, run_id) if r.dtype == "float32"}
    assert results["torch-rev"].status == "pass", results["torch-rev"].message
    assert results["torch-func-fwd"].status == "fail"
    assert "finds this one wrong" in results["torch-func-fwd"].message
    assert len(jobs_of(service.database_url, run_id)) == 2


def test_a_runs_repeats_reach_every_cell(service: Service) -> None:
    plain, repeated = (service.submit(scenarios="ok/poly", backends=["torch-rev"], dtypes=["float64"], **extra)
                       for extra in ({}, {"repeats": 2}))
    spreads = [[r.repeat_spread for r in results_of(service.database_url, service.wait_finished(run_id)["id"])]
               for run_id in (plain, repeated)]
    assert spreads == [[None], [0.0]]  # not repeated; repeated, bitwise identical


def test_a_redelivered_job_rewrites_its_rows(service: Service) -> None:
    from celery import Celery

    run_id = service.submit(scenarios="ok/poly", backends=["fd"])
    service.wait_finished(run_id)
    before = {(r.scenario, r.backend, r.device, r.dtype): r.id for r in results_of(service.database_url, run_id)}
    (job,) = jobs_of(service.database_url, run_id)
    # As if its worker died after storing the cells: running, its lease lapsed, the message delivered again.
    with session_scope(service.database_url) as session:
        stale = session.get(Job, job.id)
        stale.status, stale.lease_renewed_at = "running", utcnow() - timedelta(hours=1)
        session.get(Run, run_id).status = "running"
    sender = Celery(broker=service.broker_url)
    sender.send_task("gradci.run_job", args=[job.id], queue="cpu")
    wait_for(lambda: jobs_of(service.database_url, run_id)[0].status == "done", "the redelivered job")
    run = service.wait_finished(run_id)
    after = results_of(service.database_url, run_id)
    assert_each_cell_once(after)
    assert {(r.scenario, r.backend, r.device, r.dtype): r.id for r in after} == before
    assert jobs_of(service.database_url, run_id)[0].attempts == 2
    assert run["status"] == "passed" and run["counts"]["pass"] == 1 and run["counts"]["skip"] == 1
    # A delivery of a finished job is dropped: no attempt counted, nothing rewritten.
    sender.send_task("gradci.run_job", args=[job.id], queue="cpu")
    time.sleep(2)
    assert jobs_of(service.database_url, run_id)[0].attempts == 2
    sender.close()


def test_a_job_whose_worker_vanished_is_sent_again(service: Service) -> None:
    """A worker that died whole (not just its pool process) leaves its job running; the live
    workers notice its heartbeat stopped and send the job again."""
    run_id = service.submit(scenarios="ok/trig", backends=["fd"], dtypes=["float64"])
    service.wait_finished(run_id)
    (job,) = jobs_of(service.database_url, run_id)
    with session_scope(service.database_url) as session:
        orphan = session.get(Job, job.id)
        orphan.status, orphan.worker, orphan.started_at = "running", "cpu-1@vanished", utcnow() - timedelta(hours=1)
        run = session.get(Run, run_id)
        run.status, run.finished_at = "running", None
    wait_for(lambda: jobs_of(service.database_url, run_id)[0].status == "done", "the orphaned job to run again")
    assert jobs_of(service.database_url, run_id)[0].attempts == 2
    assert service.wait_finished(run_id)["status"] == "passed"
    assert_each_cell_once(results_of(service.database_url, run_id))


def test_cancellation_stops_running_jobs_and_drops_waiting_ones(service: Service) -> None:
    run_id = service.submit(scenarios="slow/*", backends=["fd"], dtypes=["float64"])
    wait_for(lambda: results_of(service.database_url, run_id), "a first slow cell", interval_s=0.1)
    with service.client() as client:
        response = client.post(f"/api/runs/{run_id}/cancel")
    assert response.status_code in (200, 202), response.text
    run = service.wait_finished(run_id)
    assert run["status"] == "cancelled"
    results = results_of(service.database_url, run_id)
    assert_each_cell_once(results)
    assert len(results) < 6
    jobs = jobs_of(service.database_url, run_id)
    assert {j.status for j in jobs} <= {"cancelled", "done"} and jobs[-1].status == "cancelled"


def test_an_unknown_commit_ends_the_run_with_a_clear_error(service: Service) -> None:
    run_id = service.submit(sha="0" * 40)
    run = service.wait_finished(run_id)
    assert run["status"] == "error"
    assert f"commit '{'0' * 40}' does not exist" in run["error_message"]


# --- embedded -----------------------------------------------------------------------------------


def test_embedded_mode_serves_the_same_path(project: tuple[Path, str], tmp_path: Path) -> None:
    """`gradci up` on SQLite and the SQLite transport: the demo, a repository run submitted with
    `gradci submit --wait`, `gradci status`, and a killed worker restarted by the supervisor."""
    repo, sha = project
    workdir, port = tmp_path / "gradci", free_port()
    env = service_env(workdir=str(workdir), worker_heartbeat_s="1", job_chunk_size="2")
    up = spawn([sys.executable, "-m", "gradci", "up", "--demo", "--port", str(port), "--backends", "fd",
                "--dtypes", "float64", "--scenarios", "elementary/num-to-num/*"], env, tmp_path / "up.log", cwd=tmp_path)
    database_url = f"sqlite:///{workdir / 'gradci.db'}"
    try:
        wait_for(lambda: "serving" in (tmp_path / "up.log").read_text(), "the demo run", timeout_s=150)
        output = (tmp_path / "up.log").read_text()
        assert "run 1: passed" in output and f"http://127.0.0.1:{port}/runs/1" in output
        token = (workdir / "api-token").read_text().strip()
        assert token in output and (workdir / "api-token").stat().st_mode & 0o077 == 0
        assert len(results_of(database_url, 1)) == 12

        first_worker = _worker_pids(database_url)
        os.kill(first_worker.pop(), signal.SIGKILL)
        wait_for(lambda: _worker_pids(database_url) - first_worker, "the supervisor to restart the worker", timeout_s=60)

        cli = [sys.executable, "-m", "gradci"]
        submitted = subprocess.run([*cli, "submit", "--server", f"http://127.0.0.1:{port}", "--repo", str(repo),
                                    "--sha", sha, "--scenarios", "ok/*", "--backends", "fd", "--wait"],
                                   env=env, cwd=tmp_path, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
        assert submitted.returncode == 0, submitted.stdout + submitted.stderr
        assert "run 2 queued" in submitted.stdout and "run 2: passed" in submitted.stdout
        results = results_of(database_url, 2)
        assert_each_cell_once(results)
        assert len(results) == 3 * 2 and {r.status for r in results} == {"pass", "skip"}
        status = subprocess.run([*cli, "status", "2", "--server", f"http://127.0.0.1:{port}"], env=env, cwd=tmp_path,
                                capture_output=True, text=True, timeout=60)
        assert status.returncode == 0 and "run 2: passed" in status.stdout
    finally:
        stop(up, grace_s=30)
        dispose_engine(database_url)
    assert up.returncode == 0, (tmp_path / "up.log").read_text()[-3000:]


def _worker_pids(database_url: str) -> set[int]:
    """Worker names are "<device>-<pid>@<host>": the pids of those that beat in the last 3 s."""
    with session_scope(database_url, readonly=True) as session:
        names = session.scalars(select(Worker.name).where(Worker.last_heartbeat >= utcnow() - timedelta(seconds=3)))
        return {int(name.split("@")[0].rsplit("-", 1)[1]) for name in names}

