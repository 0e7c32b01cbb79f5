"""`gradci devices` and the simulated GPU inventory, as a user and a worker meet them: the command is
a real subprocess; discovery, heartbeats and GET /api/workers read a real inventory file."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import types
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from gradci._testing.processes import service_env, stop, wait_for
from gradci._testing.service import start_worker
from gradci.scenarios.contract.simulated_gpus import INVENTORY_VARIABLE, InventoryError
from gradci.services.api.app import create_app
from gradci.services.db.models import Worker
from gradci.services.db.session import session_scope
from gradci.services.settings import Settings
from gradci.web.app import create_app as create_dashboard
from gradci.worker.context import WorkerContext
from gradci.worker.device_discovery import discover_devices, gpu_records, parse_worker_device
from gradci.worker.heartbeat import Heartbeat
from tests.support.cells import TWO_GPUS


def gradci_devices(*args: str, inventory: Path | None = None, command: str = "devices",
                   env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    env = {key: value for key, value in {**os.environ, **(env or {})}.items() if key != INVENTORY_VARIABLE}
    if inventory is not None:
        env[INVENTORY_VARIABLE] = str(inventory)
    return subprocess.run([sys.executable, "-m", "gradci", command, *args], capture_output=True, text=True,
                          timeout=300, env=env)


@pytest.mark.slow
def test_this_machine_lists_its_cpu_and_the_gpus_torch_sees() -> None:
    done = gradci_devices("--json")
    assert done.returncode == 0, done.stderr
    inventory = json.loads(done.stdout)
    cpu, *gpus = inventory["devices"]
    assert cpu["device"] == "cpu" and cpu["name"] and cpu["cores"] == os.cpu_count()
    assert 0 < cpu["memory_free"] <= cpu["memory_total"]
    frameworks = inventory["frameworks"]
    assert frameworks["torch"]["version"] == metadata.version("torch")
    assert frameworks["jax"]["version"] == metadata.version("jax")
    assert "cpu" in frameworks["torch"]["devices"] and "cpu:0" in frameworks["jax"]["devices"]
    # No simulation: the GPUs listed are the ones torch sees (none on a CPU machine).
    assert [gpu["device"] for gpu in gpus] == [d for d in frameworks["torch"]["devices"] if d.startswith("cuda:")]
    assert inventory["simulated"] is None


@pytest.mark.slow
def test_a_simulated_inventory_is_listed_in_place_of_the_machines_gpus(tmp_path: Path) -> None:
    path = tmp_path / "gpus.json"
    path.write_text(json.dumps(TWO_GPUS))
    done = gradci_devices("--json", inventory=path)
    assert done.returncode == 0, done.stderr
    inventory = json.loads(done.stdout)
    gpus = inventory["devices"][1:]
    assert [(g["device"], g["name"], g["capability"], g["memory_total"], g["source"]) for g in gpus] == [
        ("cuda:0", "NVIDIA H100 80GB HBM3", "90", 85_520_809_984, "simulated"),
        ("cuda:1", "NVIDIA A100-SXM4-40GB", "80", 42_949_672_960, "simulated"),
    ]
    assert gpus[0]["memory_free"] == 80_000_000_000 and (gpus[0]["driver"], gpus[0]["cuda"]) == ("550.54.15", "12.4")
    assert gpus[1]["memory_free"] == 42_949_672_960 and gpus[1]["driver"] is None  # free defaults to total
    assert inventory["simulated"] == str(path)
    table = gradci_devices(inventory=path)
    assert table.returncode == 0, table.stderr
    assert "H100" in table.stdout and "A100" in table.stdout and "simulated" in table.stdout


def test_workers_discover_and_serve_simulated_gpus(two_gpus: Path) -> None:
    assert [(d.name, d.capability) for d in discover_devices()] == [("cpu", None), ("cuda:0", "90"), ("cuda:1", "80")]
    second = parse_worker_device("cuda:1")
    assert second.capability == "80" and second.queues == ["cuda", "cuda.sm80"]
    assert parse_worker_device("cuda").queues == ["cuda", "cuda.sm90"]
    with pytest.raises(ValueError, match=r"no device cuda:2 on this machine \(found: cpu, cuda:0, cuda:1\)"):
        parse_worker_device("cuda:2")


@pytest.mark.integration
def test_the_heartbeat_carries_the_device_record_to_the_api(clean_environment: None, two_gpus: Path,
                                                           sqlite_url: str, redis_url: str, tmp_path: Path) -> None:
    # The workers list is an operator's: the admin token reads it.
    settings = Settings(database_url=sqlite_url, broker_url=redis_url, workdir=tmp_path / "work", api_token="operator")
    for device in ("cuda:1", "cpu"):
        Heartbeat(f"{device}-worker", WorkerContext(settings, parse_worker_device(device), f"{device}-worker")).beat()
    with TestClient(create_app(settings), headers={"Authorization": "Bearer operator"}) as client:
        workers = {w["name"]: w for w in client.get("/api/workers").json()}
    gpu: dict[str, Any] = workers["cuda:1-worker"]["versions"]["device"]
    assert (gpu["device"], gpu["name"], gpu["capability"], gpu["memory_total"]) == (
        "cuda:1", "NVIDIA A100-SXM4-40GB", "80", 42_949_672_960)
    assert workers["cuda:1-worker"]["versions"]["torch"] == metadata.version("torch")
    cpu = workers["cpu-worker"]["versions"]["device"]
    assert cpu["device"] == "cpu" and cpu["cores"] == os.cpu_count() and cpu["memory_total"] > 0
    with TestClient(create_dashboard(settings), headers={"Authorization": "Bearer operator"}) as dashboard:
        page = dashboard.get("/workers").text
    # The workers page names the GPU model and keeps the record out of the versions column.
    assert "NVIDIA A100-SXM4-40GB" in page and "capability" not in page


@pytest.mark.parametrize(("content", "problem"), [
    ("[{", "not JSON"),
    (json.dumps({"gpus": TWO_GPUS}), "it holds a JSON object, not a list"),
    (json.dumps([{"name": "A100", "capability": "80"}]), "GPU 0: missing memory_total"),
    (json.dumps([TWO_GPUS[0], {**TWO_GPUS[1], "capability": 80}]), "GPU 1: capability 80 is not a string"),
    (json.dumps([{**TWO_GPUS[1], "capabilty": "80"}]), "GPU 0: unknown key capabilty"),
    (json.dumps([{**TWO_GPUS[1], "memory_total": True}]), "GPU 0: memory_total True is not a positive"),
    (json.dumps([{**TWO_GPUS[1], "memory_free": -1}]), "GPU 0: memory_free -1 is not a positive"),
    (json.dumps([{**TWO_GPUS[1], "cuda": 12.4}]), "GPU 0: cuda 12.4 is not a string"),
    (json.dumps(["A100"]), "GPU 0: a string, not an object"),
])
def test_a_malformed_inventory_is_refused_naming_the_file(content: str, problem: str, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "gpus.json"
    path.write_text(content)
    monkeypatch.setenv(INVENTORY_VARIABLE, str(path))
    with pytest.raises(InventoryError) as refused:
        discover_devices()
    message = str(refused.value)
    assert message.startswith(f"{INVENTORY_VARIABLE}={path}: {problem}") and "\n" not in message
    assert "expected a JSON list of GPUs" in message


def test_the_command_reports_a_malformed_inventory_in_one_line(tmp_path: Path) -> None:
    missing = tmp_path / "absent.json"
    done = gradci_devices(inventory=missing)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip().count("\n") == 0
    assert done.stderr.startswith(f"error: {INVENTORY_VARIABLE}={missing}: cannot read it (No such file or directory)")


def test_gradci_up_refuses_a_malformed_inventory_in_one_line_before_starting_anything(tmp_path: Path) -> None:
    missing = tmp_path / "absent.json"
    done = gradci_devices("--port", "1", command="up", inventory=missing,
                          env={"GRADCI_WORKDIR": str(tmp_path / "work")})
    assert done.returncode == 2 and "Traceback" not in done.stdout + done.stderr
    assert done.stdout.strip().count("\n") == 0 and f"{INVENTORY_VARIABLE}={missing}" in done.stdout


class FakeNvml(types.ModuleType):
    """pynvml as nvidia-ml-py before 11.515 answers (in bytes) on a machine with three GPUs: NVML
    itself needs a driver, which this machine has not."""

    GPUS = [(b"NVIDIA A100-SXM4-40GB", (8, 0), 42_949_672_960), (b"NVIDIA H100 80GB HBM3", (9, 0), 85_520_809_984),
            (b"NVIDIA L4", (8, 9), 24_152_899_584)]

    def __init__(self) -> None:
        super().__init__("pynvml")
        self.nvmlInit = self.nvmlShutdown = lambda: None
        self.nvmlSystemGetDriverVersion = lambda: b"550.54.15"
        self.nvmlSystemGetCudaDriverVersion = lambda: 12040
        self.nvmlDeviceGetCount = lambda: len(self.GPUS)
        self.nvmlDeviceGetHandleByIndex = lambda index: index
        self.nvmlDeviceGetName = lambda handle: self.GPUS[handle][0]
        self.nvmlDeviceGetCudaComputeCapability = lambda handle: self.GPUS[handle][1]
        self.nvmlDeviceGetMemoryInfo = lambda handle: types.SimpleNamespace(total=self.GPUS[handle][2],
                                                                            free=self.GPUS[handle][2] // 2)


@pytest.mark.parametrize(("visible", "expected"), [
    (None, [("NVIDIA A100-SXM4-40GB", "80"), ("NVIDIA H100 80GB HBM3", "90"), ("NVIDIA L4", "89")]),
    ("2,1", [("NVIDIA L4", "89"), ("NVIDIA H100 80GB HBM3", "90")]),
    ("1,7,0", [("NVIDIA H100 80GB HBM3", "90")]),  # CUDA ignores everything from an unknown GPU on
])
def test_nvml_gpus_are_numbered_as_cuda_will_see_them(visible: str | None, expected: list[tuple[str, str]],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(INVENTORY_VARIABLE, raising=False)
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml())
    if visible is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    gpus = gpu_records()
    assert [(g["name"], g["capability"]) for g in gpus] == expected
    assert [g["device"] for g in gpus] == [f"cuda:{i}" for i in range(len(expected))]
    assert all((g["driver"], g["cuda"], g["source"]) == ("550.54.15", "12.4", "nvml") for g in gpus)
    assert all(g["memory_free"] * 2 == g["memory_total"] for g in gpus)


@pytest.mark.integration
def test_a_worker_serves_a_simulated_gpu(sqlite_url: str, redis_url: str, tmp_path: Path) -> None:
    """`gradci worker --device cuda:1` on a machine without a GPU: it consumes that GPU's queues and
    its heartbeat names the GPU."""
    inventory = tmp_path / "gpus.json"
    inventory.write_text(json.dumps(TWO_GPUS))
    env = service_env(database_url=sqlite_url, broker_url=redis_url, workdir=str(tmp_path / "work"),
                      worker_heartbeat_s="0.5", device_inventory=str(inventory))
    worker = start_worker(env, tmp_path, "cuda:1", None)
    try:
        def registered() -> Worker | None:
            with session_scope(sqlite_url, readonly=True) as session:
                return session.scalar(select(Worker))
        row = wait_for(registered, "the worker's first heartbeat", timeout_s=120)
    finally:
        stop(worker)
    assert (row.device, row.queue) == ("cuda:1", "cuda,cuda.sm80")
    assert (row.versions["device"]["name"], row.versions["device"]["capability"]) == ("NVIDIA A100-SXM4-40GB", "80")
