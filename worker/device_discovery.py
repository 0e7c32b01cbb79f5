"""This machine's devices, and which one a worker serves.

A run names devices logically (``gradci.scenarios.contract.devices``); jobs go to the queue of their device's kind
and a GPU worker consumes ``cuda`` plus the queue of its own capability (``gradci.services.broker.queues``): the
worker, not the run, picks the physical GPU, and results keep the run's device label so that a
redelivery on another GPU rewrites the same rows.

Discovery never initialises CUDA in this process (a Celery prefork parent must stay CUDA-free):
it reads a simulated inventory when GRADCI_DEVICE_INVENTORY names one (``gradci.scenarios.contract.simulated_gpus``),
else asks NVML when nvidia-ml-py is installed, else torch in a throwaway subprocess. Every source
gives the same record (``gpu_record``), which ``gradci devices`` lists and heartbeats carry.
"""
from __future__ import annotations

import dataclasses
import itertools
import json
import os
import platform
import re
import subprocess
import sys
from collections.abc import Mapping
from importlib import metadata
from pathlib import Path
from typing import Any

from gradci.scenarios.contract.devices import CPU, CUDA
from gradci.scenarios.contract.simulated_gpus import INVENTORY_VARIABLE, read_simulated_gpus

PROBE_TIMEOUT_S = 60


@dataclasses.dataclass(frozen=True)
class LocalDevice:
    """A device of this machine: ``cpu`` or ``cuda:N``.

    GPUs come with their compute capability ("90") and, for a discovered GPU, its inventory record.
    """

    name: str
    capability: str | None = None
    record: Mapping[str, Any] | None = dataclasses.field(default=None, compare=False, repr=False)

    @property
    def index(self) -> int | None:
        return int(self.name.split(":")[1]) if self.name.startswith(f"{CUDA}:") else None

    @property
    def queues(self) -> list[str]:
        """The queues a worker for this device consumes."""
        # Imported here: discovery alone (scripts/gpu_check.sh on a bare GPU machine) needs no Celery.
        from gradci.services.broker.queues import queues_of_worker

        return queues_of_worker(self.name, self.capability)

    def describe(self) -> dict[str, Any]:
        """The inventory record of this device: the CPU's read now, a GPU's as discovery found it."""
        if self.name == CPU:
            return cpu_record()
        return dict(self.record or {"device": self.name, "kind": CUDA, "capability": self.capability})


FRAMEWORK_PACKAGES = ("torch", "jax", "jaxlib")


def package_versions(packages: tuple[str, ...]) -> dict[str, str | None]:
    """Installed versions from package metadata: nothing is imported (no framework in a worker's parent)."""
    found: dict[str, str | None] = {}
    for package in packages:
        try:
            found[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            found[package] = None
    return found


def device_record(device: LocalDevice, *, cuda_visible_devices: str | None = None,
                  memory_caps: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """What produced a worker's results, as its heartbeat carries it and every job it runs stores.

    The device's inventory record, the framework versions installed, and for a GPU worker the
    CUDA_VISIBLE_DEVICES its runner is pinned to and the memory caps the runner is given.
    """
    record = {**device.describe(), "frameworks": package_versions(FRAMEWORK_PACKAGES)}
    if cuda_visible_devices is not None:
        record["cuda_visible_devices"] = cuda_visible_devices
    if memory_caps is not None:
        record["memory_caps"] = dict(memory_caps)
    return record


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
    return [LocalDevice(CPU)] + [LocalDevice(gpu["device"], gpu["capability"], gpu) for gpu in gpu_records()]


def device_inventory() -> dict[str, Any]:
    """Everything ``gradci devices`` shows, as plain data.

    The CPU and each GPU (``devices``), the torch and jax versions with the devices each sees
    (``frameworks``, asked in a subprocess), and the simulated inventory file when one replaced the
    GPUs (``simulated``).
    """
    return {"devices": [cpu_record(), *gpu_records()], "frameworks": framework_devices(),
            "simulated": os.environ.get(INVENTORY_VARIABLE) or None}


def cpu_record() -> dict[str, Any]:
    """The CPU: its model, logical cores, and memory.

    ``memory_free``: what new processes could still get, MemAvailable. Linux's /proc; None where it is
    not there.
    """
    meminfo = _proc_fields("/proc/meminfo")
    kib = {key: int(meminfo[key].split()[0]) * 1024 if key in meminfo else None for key in ("MemTotal", "MemAvailable")}
    return {"device": CPU, "kind": CPU, "name": _proc_fields("/proc/cpuinfo").get("model name") or platform.machine(),
            "cores": os.cpu_count(), "memory_total": kib["MemTotal"], "memory_free": kib["MemAvailable"],
            "source": "proc"}


def _proc_fields(path: str) -> dict[str, str]:
    """``key: value`` lines of a /proc file, the first of each key (cpuinfo repeats them per core)."""
    try:
        lines = Path(path).read_text().splitlines()
    except OSError:
        return {}
    fields: dict[str, str] = {}
    for key, _, value in (line.partition(":") for line in lines):
        fields.setdefault(key.strip(), value.strip())
    return fields


def gpu_record(index: int, *, name: str | None, capability: str, memory_total: int | None,
               memory_free: int | None, driver: str | None, cuda: str | None, source: str) -> dict[str, Any]:
    """One GPU as ``cuda:index`` (CUDA's numbering for this process).

    ``driver``: the NVIDIA driver; ``cuda``: the newest CUDA version that driver supports.
    """
    return {"device": f"{CUDA}:{index}", "kind": CUDA, "name": name, "capability": capability,
            "memory_total": memory_total, "memory_free": memory_free, "driver": driver, "cuda": cuda,
            "source": source}


def gpu_records() -> list[dict[str, Any]]:
    """Every GPU this process sees, from the first source that answers (see the module's doc)."""
    simulated = os.environ.get(INVENTORY_VARIABLE)
    if simulated:
        return [gpu_record(index, source="simulated", **gpu)
                for index, gpu in enumerate(read_simulated_gpus(simulated))]
    try:
        gpus = _gpus_from_nvml()
    except _NotNumeric:
        gpus = None
    return gpus if gpus is not None else _gpus_from_torch_subprocess()


def _gpus_from_nvml() -> list[dict[str, Any]] | None:
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception:  # noqa: BLE001 - no driver: NVML is installed but there is no GPU to see
        return []
    try:
        driver = _decoded(pynvml.nvmlSystemGetDriverVersion())
        cuda = _cuda_version(pynvml.nvmlSystemGetCudaDriverVersion())
        physical = {}
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(handle)
            memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
            physical[index] = dict(name=_decoded(pynvml.nvmlDeviceGetName(handle)), capability=f"{major}{minor}",
                                   memory_total=memory.total, memory_free=memory.free, driver=driver, cuda=cuda)
    finally:
        pynvml.nvmlShutdown()
    visible = visible_indices()
    # CUDA numbers the visible GPUs from 0, as torch and jax will see them, and ignores every entry
    # from the first that names no GPU on.
    order = sorted(physical) if visible is None else list(itertools.takewhile(physical.__contains__, visible))
    return [gpu_record(cuda_index, source="nvml", **physical[index]) for cuda_index, index in enumerate(order)]


def _decoded(text: str | bytes) -> str:
    """nvidia-ml-py before 11.515 returns bytes where later versions return str."""
    return text.decode() if isinstance(text, bytes) else text


def _cuda_version(encoded: int) -> str:
    """CUDA's integer version (12040) as people write it (12.4)."""
    return f"{encoded // 1000}.{encoded % 1000 // 10}"


def visible_indices() -> list[int] | None:
    """The physical GPUs CUDA_VISIBLE_DEVICES lets this process see (None: all of them).

    A list of UUIDs is not mapped here: discovery then asks torch, which understands it.
    """
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
import ctypes, json
try:
    import torch
except ImportError:
    print("[]")
    raise SystemExit
count = torch.cuda.device_count() if torch.cuda.is_available() else 0
cuda = None
if count:
    version = ctypes.c_int()
    try:
        ctypes.CDLL("libcuda.so.1").cuDriverGetVersion(ctypes.byref(version))
        cuda = version.value
    except OSError:  # torch found the driver under another name: the version stays unknown
        pass
gpus = []
for i in range(count):
    properties = torch.cuda.get_device_properties(i)
    free, total = torch.cuda.mem_get_info(i)
    gpus.append({"name": properties.name, "capability": "%d%d" % (properties.major, properties.minor),
                 "memory_total": total, "memory_free": free, "cuda": cuda})
print(json.dumps(gpus))
"""


def _gpus_from_torch_subprocess() -> list[dict[str, Any]]:
    try:
        gpus = _probe(_TORCH_PROBE)
    except (subprocess.SubprocessError, ValueError, IndexError, OSError):
        return []
    driver = _driver_from_proc()
    return [gpu_record(index, name=gpu["name"], capability=gpu["capability"], memory_total=gpu["memory_total"],
                       memory_free=gpu["memory_free"], driver=driver,
                       cuda=_cuda_version(gpu["cuda"]) if gpu["cuda"] else None, source="torch")
            for index, gpu in enumerate(gpus)]


def _driver_from_proc() -> str | None:
    """The NVIDIA driver's version from its kernel module's banner, read without CUDA."""
    try:
        banner = Path("/proc/driver/nvidia/version").read_text()
    except OSError:
        return None
    found = re.search(r"\s(\d+\.\d+(?:\.\d+)?)\s", banner)
    return found.group(1) if found else None


_FRAMEWORKS_PROBE = """
import json, os
os.environ["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false"  # a look at the GPUs must not take their memory
found = {}
try:
    import torch
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    found["torch"] = {"version": torch.__version__, "cuda": torch.version.cuda,
                      "devices": ["cpu"] + ["cuda:%d" % i for i in range(count)]}
except ImportError:
    found["torch"] = {"version": None, "cuda": None, "devices": []}
try:
    import jax
    devices = []
    for backend in ("cpu", "gpu"):
        try:
            devices += ["%s:%d" % (d.platform, d.id) for d in jax.devices(backend)]
        except RuntimeError:  # no such backend on this machine
            pass
    found["jax"] = {"version": jax.__version__, "devices": devices}
except ImportError:
    found["jax"] = {"version": None, "devices": []}
print(json.dumps(found))
"""


def framework_devices() -> dict[str, Any]:
    """torch's and jax's versions and the devices each sees, asked in a subprocess.

    The subprocess keeps this process from ever initialising CUDA. ``error`` says why when the probe
    itself failed.
    """
    try:
        return _probe(_FRAMEWORKS_PROBE)
    except (subprocess.SubprocessError, ValueError, IndexError, OSError) as exc:
        return {"error": f"{type(exc).__name__}: {exc}"[:300]}


def _probe(script: str) -> Any:
    """The JSON a script prints last, run by this interpreter in a throwaway process."""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=PROBE_TIMEOUT_S, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])
