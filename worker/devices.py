"""This machine's devices, and which one a worker serves.

A run names devices logically (``scenarios.devices``); jobs go to the queue of their device's kind
and a GPU worker consumes ``cuda`` plus the queue of its own capability (``services.queues``): the
worker, not the run, picks the physical GPU, and results keep the run's device label so that a
redelivery on another GPU rewrites the same rows.

Discovery never initialises CUDA in this process (a Celery prefork parent must stay CUDA-free):
it asks NVML when nvidia-ml-py is installed, else torch in a throwaway subprocess.
"""
from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys

from scenarios.devices import CPU, CUDA
from services.queues import queues_of_worker

PROBE_TIMEOUT_S = 60


@dataclasses.dataclass(frozen=True)
class LocalDevice:
    """A device of this machine: ``cpu`` or ``cuda:N``, with its compute capability ("90") for GPUs."""

    name: str
    capability: str | None = None

    @property
    def index(self) -> int | None:
        return int(self.name.split(":")[1]) if self.name.startswith(f"{CUDA}:") else None

    @property
    def queues(self) -> list[str]:
        """The queues a worker for this device consumes."""
        return queues_of_worker(self.name, self.capability)


def parse_worker_device(device: str) -> LocalDevice:
    """``gradci worker --device``: ``cpu`` or ``cuda:N`` (``cuda`` alone means ``cuda:0``)."""
    if device == CPU:
        return LocalDevice(CPU)
    if device == CUDA:
        device = f"{CUDA}:0"
    if not re.match(r"^cuda:\d+$", device):
        raise ValueError(f"a worker serves cpu or one GPU (cuda:N), not {device!r}")
    known = {d.name: d for d in discover_devices()}
    if device not in known:
        raise ValueError(f"no device {device} on this machine (found: {', '.join(known)})")
    return known[device]


def discover_devices() -> list[LocalDevice]:
    """cpu, then every GPU of this machine."""
    try:
        gpus = _gpus_from_nvml()
    except _NotNumeric:
        gpus = None
    if gpus is None:
        gpus = _gpus_from_torch_subprocess()
    return [LocalDevice(CPU)] + [LocalDevice(f"{CUDA}:{index}", capability) for index, capability in gpus]


def _gpus_from_nvml() -> list[tuple[int, str]] | None:
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception:  # no driver: NVML is installed but there is no GPU to see
        return []
    try:
        capabilities = {}
        for index in range(pynvml.nvmlDeviceGetCount()):
            major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(pynvml.nvmlDeviceGetHandleByIndex(index))
            capabilities[index] = f"{major}{minor}"
    finally:
        pynvml.nvmlShutdown()
    visible = visible_indices()
    if visible is None:
        return sorted(capabilities.items())
    # CUDA numbers the visible GPUs from 0, as torch and jax will see them.
    return [(cuda_index, capabilities[index]) for cuda_index, index in enumerate(visible) if index in capabilities]


def visible_indices() -> list[int] | None:
    """The physical GPUs CUDA_VISIBLE_DEVICES lets this process see (None: all of them). A list of
    UUIDs is not mapped here: discovery then asks torch, which understands it."""
    value = os.environ.get("CUDA_VISIBLE_DEVICES")
    if value is None:
        return None
    entries = [entry.strip() for entry in value.split(",") if entry.strip()]
    if not all(entry.isdigit() for entry in entries):
        raise _NotNumeric(value)
    return [int(entry) for entry in entries]


class _NotNumeric(ValueError):
    pass


_TORCH_PROBE = """
import json
try:
    import torch
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    print(json.dumps([[i, "%d%d" % torch.cuda.get_device_capability(i)] for i in range(count)]))
except ImportError:
    print("[]")
"""


def _gpus_from_torch_subprocess() -> list[tuple[int, str]]:
    try:
        done = subprocess.run([sys.executable, "-c", _TORCH_PROBE], capture_output=True, text=True,
                              timeout=PROBE_TIMEOUT_S, check=True)
        return [(int(index), str(capability)) for index, capability in json.loads(done.stdout.strip().splitlines()[-1])]
    except (subprocess.SubprocessError, ValueError, IndexError, OSError):
        return []
