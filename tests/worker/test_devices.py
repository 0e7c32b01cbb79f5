"""Devices, queues and worker pools: pure rules, no GPU needed."""
from __future__ import annotations

import pytest

from gradci.cli.client import exit_code
from gradci.scenarios.contract.devices import validate_device
from gradci.worker.context import physical_gpu
from gradci.worker.device_discovery import LocalDevice, parse_worker_device
from gradci.worker.start import worker_argv


def test_a_gpu_worker_consumes_cuda_and_its_capability_queue() -> None:
    assert LocalDevice("cpu").queues == ["cpu"]
    assert LocalDevice("cuda:1", "90").queues == ["cuda", "cuda.sm90"]
    assert LocalDevice("cuda:1", "90").index == 1


def test_unknown_devices_are_refused() -> None:
    with pytest.raises(ValueError, match="no device cuda:99"):
        parse_worker_device("cuda:99")
    with pytest.raises(ValueError, match="cpu or one GPU"):
        parse_worker_device("tpu")
    with pytest.raises(ValueError, match="unknown device"):
        validate_device("cuda:")


def test_gpu_workers_never_fork() -> None:
    assert "--pool=prefork" in worker_argv("cpu", ["cpu"], 2, "n", "INFO")
    assert "--pool=solo" in worker_argv("cuda:0", ["cuda"], 1, "n", "INFO")
    assert "--pool=threads" in worker_argv("cuda:0", ["cuda"], 2, "n", "INFO")


def test_the_runner_gets_the_physical_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert physical_gpu(1) == "1"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")
    assert physical_gpu(1) == "5"


@pytest.mark.parametrize(("status", "counts", "code"), [
    ("passed", {"pass": 3, "skip": 1}, 0),
    ("failed", {"pass": 3, "fail": 1}, 1),
    ("passed", {"pass": 3, "xpass": 1}, 1),
    ("cancelled", {"pass": 3}, 1),
    ("error", {}, 1),
])
def test_exit_codes_follow_gradci_check(status: str, counts: dict[str, int], code: int) -> None:
    assert exit_code({"status": status, "counts": counts}) == code
