"""What a worker process knows about itself: its settings, name, device, runner and checkouts.

``gradci worker --device cuda:1`` calls ``configure`` before Celery starts; pool processes forked
from it inherit the configuration.
"""
from __future__ import annotations

import dataclasses
import os
import socket
from pathlib import Path

from scenarios.devices import CPU
from services.settings import Settings, get_settings
from worker.checkout import Checkouts
from worker.devices import LocalDevice
from worker.runner import WarmRunner, shared_runner
from worker.sandbox import SandboxPolicy


@dataclasses.dataclass
class WorkerContext:
    settings: Settings
    device: LocalDevice
    name: str

    @property
    def workdir(self) -> Path:
        return Path(self.settings.workdir)

    def runner(self) -> WarmRunner:
        settings = self.settings
        checkouts = self.checkouts().root
        checkouts.mkdir(parents=True, exist_ok=True)  # bound into the runner's view when it starts
        runner = shared_runner(cell_timeout_s=settings.cell_timeout_s, workdir=self.workdir,
                               list_timeout_s=settings.scenario_import_timeout_s, sandbox=self.sandbox(),
                               visible=(checkouts,), output_limit_bytes=settings.runner_output_limit_kb << 10)
        if self.device.index is not None:
            # The runner sees only this worker's GPU, as cuda:0, whichever GPU that is.
            runner.extra_env["CUDA_VISIBLE_DEVICES"] = physical_gpu(self.device.index)
        return runner

    def sandbox(self) -> SandboxPolicy:
        """Runners see nothing of the workdir but the checkouts; the address-space limit holds on
        CPU workers only (CUDA reserves address space far beyond the memory it uses)."""
        limit = self.settings.runner_memory_limit_mb if self.device.index is None else 0
        return SandboxPolicy(user=self.settings.runner_user or None, memory_limit_mb=limit or None,
                             hidden=(self.workdir,))

    def run_on(self, job_device: str) -> str | None:
        """The device the runner computes a job's cells on (None: the job's own label)."""
        return None if job_device == CPU else "cuda:0"

    def checkouts(self) -> Checkouts:
        token = self.settings.github_token.get_secret_value() if self.settings.github_token else None
        return Checkouts(self.workdir, github_token=token)


def physical_gpu(cuda_index: int) -> str:
    """The CUDA_VISIBLE_DEVICES entry of cuda:N as this process sees it (the worker itself may
    already be limited to some GPUs)."""
    visible = [entry.strip() for entry in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if entry.strip()]
    return visible[cuda_index] if cuda_index < len(visible) else str(cuda_index)


_configured: WorkerContext | None = None


def configure(device: LocalDevice, name: str | None = None, settings: Settings | None = None) -> WorkerContext:
    global _configured
    _configured = WorkerContext(settings=settings or get_settings(), device=device,
                                name=name or f"{device.name}@{socket.gethostname()}")
    return _configured


def current() -> WorkerContext:
    return _configured or configure(LocalDevice(CPU))
