"""Workers and runners on GPUs, without a GPU: one pinned worker per (simulated) GPU under ``gradci
up``, no framework in a worker's own process, the runner's memory caps, CUDA faults that restart the
runner, runners recycled above a memory ceiling, and the device record every job stores. The one
test that needs a real GPU says so and skips."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

from gradci._testing.processes import (
    alive,
    command_line,
    descendants,
    free_port,
    service_env,
    spawn,
    stop,
    wait_for,
    wait_gone,
)
from gradci._testing.repos import make_repository
from gradci._testing.service import assert_each_cell_once, results_of
from gradci.scenarios.contract.simulated_gpus import INVENTORY_VARIABLE
from gradci.services.api.app import create_app
from gradci.services.db.jobs import Claim, claim_job, jobs_of_run, lock_run, store_jobs
from gradci.services.db.session import dispose_engine, session_scope
from gradci.services.planner import JobSpec
from gradci.services.settings import Settings
from gradci.worker.context import WorkerContext
from gradci.worker.device_discovery import parse_worker_device
from gradci.worker.heartbeat import Heartbeat
from gradci.worker.runner import CellSpec, WarmRunner, close_shared_runner
from tests.support.cells import TWO_GPUS
from tests.support.checkouts import gradci_toml, scenario_checkout

CELL_TIMEOUT_S = 60.0

# Each raises, in its framework's cells, what torch and jax raise on a GPU; numpy (the reference) is fine.
FAULTY_SCENARIOS = '''
import numpy as np

from gradci import Scenario
from gradci._testing.planted import smooth


def _in_torch(x):
    return type(x).__module__.startswith("torch")


def torch_oom(x):
    import torch
    if _in_torch(x):
        raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 80.00 GiB. GPU 0 has a total "
                                          "capacity of 79.19 GiB of which 1.20 GiB is free.")
    return smooth(x)


def illegal_address(x):
    if _in_torch(x):
        raise RuntimeError("CUDA error: an illegal memory access was encountered\\n"
                           "CUDA kernel errors might be asynchronously reported at some other API call")
    return smooth(x)


def xla_oom(x):
    if type(x).__module__.startswith("jax"):
        import jax
        raise jax.errors.JaxRuntimeError("RESOURCE_EXHAUSTED: Out of memory while trying to allocate "
                                         "85899345920 bytes.")
    return smooth(x)


def broken(x):
    if _in_torch(x):
        raise ValueError("an ordinary bug")
    return smooth(x)


def real_oom(x):
    import torch
    if _in_torch(x) and x.is_cuda:
        free, total = torch.cuda.mem_get_info(x.device)
        torch.empty(2 * total, dtype=torch.uint8, device=x.device)
    return smooth(x)


def scenarios():
    x = np.array([0.3, -0.2, 0.7])
    named = {"smooth": smooth, "torch-oom": torch_oom, "illegal-address": illegal_address, "xla-oom": xla_oom,
             "broken": broken, "real-oom": real_oom, "smooth-2": smooth, "smooth-3": smooth}
    return [Scenario(name, "gradient", f, x, dtypes=("float64",)) for name, f in named.items()]
'''


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return scenario_checkout(tmp_path_factory.mktemp("faulty"), "faulty_scenarios", FAULTY_SCENARIOS)


@pytest.fixture(scope="module")
def inventory(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("inventory") / "gpus.json"
    path.write_text(json.dumps(TWO_GPUS))
    return path


@pytest.fixture(scope="module")
def gpu_context(inventory: Path, tmp_path_factory: pytest.TempPathFactory) -> WorkerContext:
    """The context of ``gradci worker --device cuda:1`` on the simulated machine."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(INVENTORY_VARIABLE, str(inventory))
        patch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
        settings = Settings(workdir=tmp_path_factory.mktemp("work"), runner_device_memory_fraction=0.5)
        return WorkerContext(settings, parse_worker_device("cuda:1"), "cuda1-worker")


@pytest.fixture(scope="module")
def gpu_runner(gpu_context: WorkerContext, project: Path, tmp_path_factory: pytest.TempPathFactory
               ) -> Iterator[WarmRunner]:
    """A runner as that worker starts it: its GPU and memory caps in its environment."""
    runner = WarmRunner(cell_timeout_s=CELL_TIMEOUT_S, workdir=tmp_path_factory.mktemp("runner"),
                        extra_env=gpu_context.runner_environment())
    yield runner
    runner.close()


def check(runner: WarmRunner, project: Path, scenario: str, backend: str = "torch-rev", device: str = "cpu") -> dict:
    spec = CellSpec(scenario=scenario, backend=backend, device=device, dtype="float64", operator="gradient",
                    source=str(project))
    return runner.run_cell(spec)


@pytest.mark.parametrize(("visible", "pinned"), [(None, "1"), ("4,5", "5")])
def test_a_gpu_worker_pins_itself_to_its_gpu(inventory: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                             visible: str | None, pinned: str) -> None:
    from gradci.worker import context as worker_context

    monkeypatch.setenv(INVENTORY_VARIABLE, str(inventory))
    monkeypatch.setattr(worker_context, "_configured", None)  # restored after the test
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible or "")  # recorded, so that configure's pin is undone
    if visible is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    configured = worker_context.configure(parse_worker_device("cuda:1"), settings=Settings(workdir=tmp_path))
    assert configured.pinned_gpu == pinned and os.environ["CUDA_VISIBLE_DEVICES"] == pinned
    assert configured.runner_environment()["CUDA_VISIBLE_DEVICES"] == pinned


def test_a_gpu_workers_runner_sees_its_gpu_and_gets_memory_caps(gpu_context: WorkerContext,
                                                                gpu_runner: WarmRunner) -> None:
    assert gpu_context.pinned_gpu == "1"
    gpu_runner.warm(["torch-rev"])
    # No CUDA device here: torch's fraction is recorded as asked and not applied, saying why.
    assert gpu_runner.device_memory == {
        "cuda_visible_devices": "1", "torch_memory_fraction": 0.5, "xla_preallocate": "false",
        "xla_memory_fraction": "0.5", "torch_applied": False, "why_not": "torch sees no CUDA device"}
    record = gpu_context.device_record()
    assert (record["device"], record["name"], record["cuda_visible_devices"]) == ("cuda:1", TWO_GPUS[1]["name"], "1")
    assert record["memory_caps"] == {"torch_memory_fraction": 0.5, "xla_preallocate": False,
                                     "xla_memory_fraction": 0.5}
    assert record["frameworks"]["torch"] == metadata.version("torch")
    cpu = WorkerContext(gpu_context.settings, parse_worker_device("cpu"), "cpu-worker")
    # A CPU runner sees the GPUs but must not preallocate 75 % of one when jax starts.
    assert cpu.runner_environment() == {"XLA_PYTHON_CLIENT_PREALLOCATE": "false"}
    assert "memory_caps" not in cpu.device_record() and cpu.pinned_gpu is None


@pytest.mark.parametrize(("scenario", "backend", "fault", "raised"), [
    ("torch-oom", "torch-rev", "device out of memory", "OutOfMemoryError: CUDA out of memory. Tried to allocate"),
    ("illegal-address", "torch-func-rev", "CUDA illegal memory access", "an illegal memory access was encountered"),
    ("xla-oom", "jax-rev", "device out of memory", "RESOURCE_EXHAUSTED: Out of memory"),
])
@pytest.mark.slow
def test_a_cuda_fault_is_an_error_cell_and_the_runner_restarts_before_the_next_cell(
        gpu_runner: WarmRunner, project: Path, scenario: str, backend: str, fault: str, raised: str) -> None:
    check(gpu_runner, project, "smooth", backend)
    pid, recycles = gpu_runner.pid, gpu_runner.recycles
    cell = check(gpu_runner, project, scenario, backend)
    assert cell["status"] == "error"
    assert cell["message"].startswith(f"{fault} (the runner was restarted): ") and raised in cell["message"]
    assert gpu_runner.pid == pid  # never in the middle of a request
    after = check(gpu_runner, project, "smooth", backend)
    assert after["status"] == "pass", after["message"]
    assert gpu_runner.pid != pid and gpu_runner.recycles == recycles + 1


def test_an_ordinary_error_keeps_the_runner(gpu_runner: WarmRunner, project: Path) -> None:
    check(gpu_runner, project, "smooth")
    pid = gpu_runner.pid
    cell = check(gpu_runner, project, "broken")
    assert cell["status"] == "error" and cell["message"].startswith("ValueError: an ordinary bug")
    assert check(gpu_runner, project, "smooth")["status"] == "pass" and gpu_runner.pid == pid


def _has_cuda() -> bool:
    import torch

    return torch.cuda.is_available()


@pytest.mark.skipif(not _has_cuda(), reason="needs an NVIDIA GPU that torch sees (this machine has none)")
def test_a_real_cuda_out_of_memory_restarts_the_runner(project: Path, tmp_path: Path) -> None:
    settings = Settings(workdir=tmp_path / "work")
    context = WorkerContext(settings, parse_worker_device("cuda:0"), "cuda0-worker")
    runner = WarmRunner(cell_timeout_s=CELL_TIMEOUT_S, workdir=tmp_path / "runner",
                        extra_env=context.runner_environment())
    try:
        spec = dict(backend="torch-rev", device="cuda", run_on="cuda:0", dtype="float64", source=str(project))
        cell = runner.run_cell(CellSpec(scenario="real-oom", **spec))
        assert runner.device_memory and runner.device_memory["torch_applied"] is True
        assert cell["status"] == "error" and cell["message"].startswith("device out of memory"), cell["message"]
        pid = runner.pid
        after = runner.run_cell(CellSpec(scenario="smooth", **spec))
        assert after["status"] == "pass" and runner.pid != pid and after["peak_memory_bytes"]
    finally:
        runner.close()


@pytest.mark.slow
def test_a_runner_above_its_memory_ceiling_restarts_between_requests(project: Path, tmp_path: Path) -> None:
    runner = WarmRunner(cell_timeout_s=CELL_TIMEOUT_S, workdir=tmp_path, max_rss_mb=1)
    pids = []
    try:
        for scenario in ("smooth", "smooth-2", "smooth-3"):
            cell = check(runner, project, scenario, backend="fd")
            assert cell["status"] == "pass", cell["message"]
            pids.append(runner.pid)
    finally:
        runner.close()
    assert len(set(pids)) == 3 and runner.recycles >= 2
    assert runner.peak_rss_bytes > 1 << 20


@pytest.mark.slow
def test_a_runner_below_its_ceiling_stays(project: Path, tmp_path: Path) -> None:
    runner = WarmRunner(cell_timeout_s=CELL_TIMEOUT_S, workdir=tmp_path, max_rss_mb=100_000)
    try:
        pids = {(check(runner, project, name, backend="fd")["status"], runner.pid) for name in ("smooth", "smooth-2")}
    finally:
        runner.close()
    assert len(pids) == 1 and runner.recycles == 0


def test_the_memory_ceiling_is_a_setting_workers_pass_to_their_runner(monkeypatch: pytest.MonkeyPatch,
                                                                      tmp_path: Path) -> None:
    monkeypatch.delenv("GRADCI_RUNNER_MAX_RSS_MB", raising=False)
    assert Settings().runner_max_rss_mb == 3000
    monkeypatch.setenv("GRADCI_RUNNER_MAX_RSS_MB", "1234")
    context = WorkerContext(Settings(workdir=tmp_path), parse_worker_device("cpu"), "cpu-worker")
    try:
        assert context.runner().max_rss_mb == 1234
    finally:
        close_shared_runner()
    # gradci check's runner too.
    from gradci.cli.sandboxed import Target, local_runner
    from gradci.scenarios.contract.matrix import Matrix
    from gradci.services.settings import get_settings

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    get_settings.cache_clear()
    try:
        with local_runner(Target(None, Matrix()), cell_timeout_s=10) as runner:
            assert runner.max_rss_mb == 1234
    finally:
        get_settings.cache_clear()


def test_a_claimed_job_stores_its_workers_device_record_and_the_api_serves_it(
        database_url: str, make_run, inventory: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(INVENTORY_VARIABLE, str(inventory))
    settings = Settings(database_url=database_url, workdir=tmp_path)
    context = WorkerContext(settings, parse_worker_device("cuda:1"), "cuda1-worker")
    Heartbeat("cuda1-worker", context).beat()
    run_id = make_run(database_url)
    with session_scope(database_url) as session:
        jobs = store_jobs(session, lock_run(session, run_id), [JobSpec("torch-rev", "cuda.sm80", "cuda.sm80", ("a",)),
                                                                JobSpec("torch-rev", "cpu", "cpu", ("a",))])
        gpu_job, cpu_job = (job.id for job in jobs)
    with session_scope(database_url) as session:
        for job_id, worker in ((gpu_job, "cuda1-worker"), (cpu_job, "never-beat")):
            claim, _ = claim_job(session, job_id, worker=worker, delivery=f"d{job_id}", max_attempts=3, lease_s=60)
            assert claim is Claim.run
    with session_scope(database_url, readonly=True) as session:
        stored = {job.id: job.device_record for job in jobs_of_run(session, run_id)}
    assert stored[gpu_job] == json.loads(json.dumps(context.device_record()))  # the heartbeat's own record
    assert stored[cpu_job] is None
    with TestClient(create_app(settings)) as client:
        served = client.get(f"/api/runs/{run_id}/jobs/{gpu_job}").json()
        assert (served["device"], served["worker"], served["status"]) == ("cuda.sm80", "cuda1-worker", "running")
        assert served["device_record"]["name"] == "NVIDIA A100-SXM4-40GB"
        assert served["device_record"]["cuda_visible_devices"] == "1"
        assert client.get(f"/api/runs/{run_id}/jobs/{cpu_job}").json()["device_record"] is None
        other_run = make_run(database_url)
        missing = client.get(f"/api/runs/{other_run}/jobs/{gpu_job}")
        assert missing.status_code == 404 and missing.json() == {"detail": f"run {other_run} has no job {gpu_job}"}


def test_a_gpu_worker_refuses_more_than_one_job_at_a_time(inventory: Path) -> None:
    env = service_env(device_inventory=str(inventory))
    done = subprocess.run([sys.executable, "-m", "gradci", "worker", "--device", "cuda:1", "--concurrency", "2"],
                          capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "error: a GPU worker runs one job at a time (--concurrency 1), not 2: its runner holds the GPU's memory; "
        "start one worker per GPU"]


# --- gradci up on a machine with two simulated GPUs --------------------------------------------------

SMOOTH_REPO = {"gradci.toml": gradci_toml("smooth_scenarios"),
               "smooth_scenarios.py": textwrap.dedent('''
                   import numpy as np
                   from gradci import Scenario
                   from gradci._testing.planted import smooth

                   def scenarios():
                       return [Scenario(f"smooth/{i}", "gradient", smooth, np.array([0.1 * i, 0.2]), dtypes=("float64",))
                               for i in range(3)]
               ''')}
# Shared objects that mean a framework (and perhaps CUDA) was loaded into a process.
FRAMEWORK_LIBRARIES = ("libtorch", "libc10", "libcuda", "libcudart", "jaxlib", "xla_extension", "libjax")


def loaded_frameworks(pid: int) -> list[str]:
    with open(f"/proc/{pid}/maps") as maps:
        return sorted({name for line in maps for name in FRAMEWORK_LIBRARIES if name in line})


def environment_of(pid: int) -> dict[str, str]:
    with open(f"/proc/{pid}/environ", "rb") as raw:
        entries = raw.read().split(b"\0")
    return dict(entry.decode(errors="replace").split("=", 1) for entry in entries if b"=" in entry)


@pytest.mark.integration
def test_gradci_up_runs_one_pinned_worker_per_gpu(inventory: Path, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    sha = make_repository(repo, SMOOTH_REPO)
    # Not "gradci": a folder of that name in the current folder of `gradci up` hides the package from
    # its runners (reported to the lead: issue 17).
    workdir, port = tmp_path / "state", free_port()
    # A ceiling every runner exceeds: each restarts between requests, and every cell is still stored once.
    env = service_env(workdir=str(workdir), worker_heartbeat_s="1", device_inventory=str(inventory),
                      runner_max_rss_mb="1")
    up = spawn([sys.executable, "-m", "gradci", "up", "--port", str(port)], env, tmp_path / "up.log", cwd=tmp_path)
    database_url = f"sqlite:///{workdir / 'gradci.db'}"
    try:
        wait_for(lambda: "serving" in (tmp_path / "up.log").read_text(), "gradci up to serve", timeout_s=180)
        token = (workdir / "api-token").read_text().strip()
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", headers={"Authorization": f"Bearer {token}"},
                          timeout=30) as client:
            workers = {w["device"]: w for w in client.get("/api/workers").json()}
            assert sorted(workers) == ["cpu", "cuda:0", "cuda:1"] and all(w["online"] for w in workers.values())
            for index, gpu in enumerate(TWO_GPUS):
                worker = workers[f"cuda:{index}"]
                record = worker["versions"]["device"]
                assert worker["queue"] == f"cuda,cuda.sm{gpu['capability']}"
                assert (record["name"], record["cuda_visible_devices"]) == (gpu["name"], str(index))
            run_id = client.post("/api/runs", json={"repo": str(repo), "sha": sha, "backends": ["fd"],
                                                    "devices": ["cpu", "cuda.sm90", "cuda.sm80"]}).json()["id"]
            wait_for(lambda: client.get(f"/api/runs/{run_id}").json()["finished_at"], "the run", timeout_s=240)
            results = results_of(database_url, run_id)
            assert_each_cell_once(results)
            # (The engine may add CPU–GPU agreement cells beside these, under devices of their own.)
            results = [r for r in results if r.device in ("cpu", "cuda.sm90", "cuda.sm80")]
            records = {r.device: client.get(f"/api/runs/{run_id}/jobs/{r.job_id}").json()["device_record"]
                       for r in results}
        assert len(results) == 9 and {r.status for r in results if r.device == "cpu"} == {"pass"}
        assert (records["cuda.sm90"]["name"], records["cuda.sm80"]["name"]) == (TWO_GPUS[0]["name"], TWO_GPUS[1]["name"])
        assert records["cpu"]["device"] == "cpu"
        tree = descendants(up.pid)
        workers_by_device = {command_line(pid).split("--device ")[1].split()[0]: pid for pid in tree
                             if "gradci worker --device" in command_line(pid)}
        assert sorted(workers_by_device) == ["cpu", "cuda:0", "cuda:1"]
        for device, pid in workers_by_device.items():
            # The Celery parents ran jobs through their runners and never loaded a framework themselves.
            assert loaded_frameworks(pid) == [], device
            if device != "cpu":
                runners = [p for p in descendants(pid) if "gradci.worker.runner_child" in command_line(p)]
                assert runners, f"no runner below the {device} worker"
                runner_env = environment_of(runners[0])
                assert runner_env["CUDA_VISIBLE_DEVICES"] == device.split(":")[1]
                assert (runner_env["XLA_PYTHON_CLIENT_PREALLOCATE"], runner_env["XLA_PYTHON_CLIENT_MEM_FRACTION"]) == (
                    "false", "0.9")
        assert "restarting the runner" in (workdir / "logs" / "worker-cpu.log").read_text()
        up.send_signal(signal.SIGINT)
        assert wait_gone(tree, 10.0) < 10.0
        assert up.wait() == 0
    finally:
        stop(up, grace_s=10)
        dispose_engine(database_url)
    assert not alive(descendants(up.pid) - {up.pid})


# --- scripts/gpu_check.sh, dry, against a simulated GPU ----------------------------------------------

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_the_gpu_check_runs_dry_and_prints_its_summary_last(inventory: Path, tmp_path: Path) -> None:
    env = {**service_env(device_inventory=str(inventory)), "PYTHON": sys.executable, "OUT": str(tmp_path / "out")}
    done = subprocess.run(["bash", "scripts/gpu_check.sh", "--quick", "--only", "devices", "--only", "oom"],
                          cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    header, *rows = done.stdout.strip().splitlines()[-7:]
    assert header.split() == ["part", "state", "seconds", "pass", "fail", "error", "skip", "xfail", "xpass", "note"]
    by_part = {row.split()[0]: row.split(maxsplit=9) for row in rows}
    assert list(by_part) == ["devices", "library", "frameworks", "agreement", "oom", "benchmark"]
    assert by_part["devices"][1] == "ok" and by_part["devices"][9].startswith(
        "NVIDIA H100 80GB HBM3 sm90 driver 550.54.15; NVIDIA A100-SXM4-40GB sm80 driver None (simulated);")
    assert by_part["oom"][1] == "ok" and "no real GPU" in by_part["oom"][9]
    assert all(by_part[name][1] == "skipped" for name in ("library", "frameworks", "agreement", "benchmark"))
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert [part["name"] for part in summary] == list(by_part)
    assert json.loads((tmp_path / "out" / "devices.json").read_text())["simulated"] == str(inventory)


@pytest.mark.parametrize(("missing", "hint"), [
    ({"gradci_absent_module": "gradci-absent"}, "bring them as wheels"),
    ({"gradci_absent_module": "gradci-absent", "gradci_absent_torch": "torch"}, "install the CUDA builds"),
])
def test_the_gpu_check_names_what_is_missing_in_one_line(monkeypatch: pytest.MonkeyPatch, capsys, tmp_path: Path,
                                                         missing: dict[str, str], hint: str) -> None:
    from bench import gpu

    monkeypatch.setattr(gpu, "NEEDED", {**gpu.NEEDED, **missing})
    monkeypatch.setattr(gpu, "WHEELS", tmp_path / "no-wheels")
    assert gpu.main(["--quick", "--out", str(tmp_path / "out")]) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and error[0].startswith(
        f"gpu_check: missing Python packages: {', '.join(missing.values())} (") and hint in error[0]
    assert not (tmp_path / "out").exists()
