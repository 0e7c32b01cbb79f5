"""What a worker process knows about itself: its settings, name, device, runner and checkouts.

``gradci worker --device cuda:1`` calls ``configure`` before Celery starts; pool processes forked
from it inherit the configuration.
"""
from __future__ import annotations

import dataclasses
import os
import socket
from pathlib import Path

from gradci.scenarios.contract.devices import CPU
from gradci.services.settings import Settings, get_settings
from gradci.worker.checkout import Checkouts
from gradci.worker.device_discovery import LocalDevice, device_record
from gradci.worker.runner import TORCH_MEMORY_FRACTION_VARIABLE, WarmRunner, shared_runner
from gradci.worker.sandbox import SandboxPolicy, box_status


@dataclasses.dataclass
class WorkerContext:
    settings: Settings
    device: LocalDevice
    name: str
    # A GPU worker's CUDA_VISIBLE_DEVICES entry (the physical GPU), fixed when it is configured:
    # ``gradci worker`` then pins its own environment to it, so that cuda:N becomes cuda:0 for
    # everything it starts.
    pinned_gpu: str | None = None
    # The jobs it runs at once (its pool's processes): what the planner shares a run's cost among.
    concurrency: int = 1

    def __post_init__(self) -> None:
        if self.pinned_gpu is None and self.device.index is not None:
            self.pinned_gpu = physical_gpu(self.device.index)

    @property
    def workdir(self) -> Path:
        return Path(self.settings.workdir)

    def memory_caps(self) -> dict[str, object] | None:
        """What a GPU worker's runner may take of its GPU (None on CPU workers).

        torch's per-process fraction, and XLA allocating on demand up to the same fraction instead of 75 %
        at start.
        """
        if self.device.index is None:
            return None
        fraction = self.settings.runner_device_memory_fraction
        return {"torch_memory_fraction": fraction, "xla_preallocate": False, "xla_memory_fraction": fraction}

    def runner_environment(self) -> dict[str, str]:
        """The runner's environment beyond the scrubbed one: its GPU and its memory caps.

        Every runner allocates XLA memory on demand: a CPU runner's jax must not take 75 % of a GPU it
        merely sees.
        """
        env = {"XLA_PYTHON_CLIENT_PREALLOCATE": "false"}
        caps = self.memory_caps()
        if caps is not None:
            # The runner sees only this worker's GPU, as cuda:0, whichever GPU that is.
            env["CUDA_VISIBLE_DEVICES"] = str(self.pinned_gpu)
            env["XLA_PYTHON_CLIENT_MEM_FRACTION"] = f"{caps['xla_memory_fraction']:.3g}"
            env[TORCH_MEMORY_FRACTION_VARIABLE] = f"{caps['torch_memory_fraction']:.3g}"
        return env

    def device_record(self) -> dict[str, object]:
        """The record its heartbeat carries and every job it claims stores."""
        return device_record(self.device, cuda_visible_devices=self.pinned_gpu, memory_caps=self.memory_caps())

    def runner(self) -> WarmRunner:
        settings = self.settings
        checkouts = self.checkouts().root
        checkouts.mkdir(parents=True, exist_ok=True)  # bound into the runner's view when it starts
        runner = shared_runner(cell_timeout_s=settings.cell_timeout_s, workdir=self.workdir,
                               list_timeout_s=settings.scenario_import_timeout_s, sandbox=self.sandbox(),
                               output_limit_bytes=settings.runner_output_limit_kb << 10,
                               max_rss_mb=settings.runner_max_rss_mb, cache_max_mb=settings.runner_cache_max_mb)
        runner.extra_env.update(self.runner_environment())
        return runner

    def sandbox(self) -> SandboxPolicy:
        """The sandbox policy: each runner in a box of its own.

        Each box has a fresh uid from the pool and a cgroup; its memory is bounded on CPU workers only
        (CUDA maps far more than it uses). Repository code is refused where no box can be built, unless the
        operator said --unsandboxed.
        """
        settings = self.settings
        limit = settings.runner_memory_limit_mb if self.device.index is None else 0
        first, last = (int(part) for part in settings.runner_uid_range.split("-"))
        return SandboxPolicy(memory_limit_mb=limit or None, scratch_mb=settings.runner_scratch_mb or None,
                             pids_max=settings.runner_pids_max, uid_range=(first, last), required=True,
                             unsandboxed=settings.runner_unsandboxed, gpu=self.device.index is not None)

    def isolation(self) -> dict[str, object]:
        """How this worker's runners are boxed, for the workers page.

        bubblewrap's version, the namespaces, the identity and limits, or why there is no box and whether
        it refuses code.
        """
        policy = self.sandbox()
        status: dict[str, object] = {**box_status(), "pids_max": policy.pids_max,
                                     "memory_limit_mb": policy.memory_limit_mb, "scratch_mb": policy.scratch_mb}
        if status["sandbox"] == "none":
            status["repository_code"] = "runs UNSANDBOXED" if policy.unsandboxed else "refused"
        return status

    def run_on(self, job_device: str) -> str | None:
        """The device the runner computes a job's cells on (None: the job's own label)."""
        return None if job_device == CPU else "cuda:0"

    def checkouts(self) -> Checkouts:
        token = self.settings.github_token.get_secret_value() if self.settings.github_token else None
        return Checkouts(self.workdir, github_token=token)


def physical_gpu(cuda_index: int) -> str:
    """The CUDA_VISIBLE_DEVICES entry of cuda:N as this process sees it.

    The worker itself may already be limited to some GPUs.
    """
    visible = [entry.strip() for entry in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if entry.strip()]
    return visible[cuda_index] if cuda_index < len(visible) else str(cuda_index)


_configured: WorkerContext | None = None


def configure(device: LocalDevice, name: str | None = None, settings: Settings | None = None,
              concurrency: int = 1) -> WorkerContext:
    """Set this process's worker context, and pin a GPU worker to its GPU.

    A GPU worker pins its own environment to its GPU: from here on the process and all it starts see
    that one GPU, as cuda:0.
    """
    global _configured
    _configured = WorkerContext(settings=settings or get_settings(), device=device,
                                name=name or f"{device.name}@{socket.gethostname()}", concurrency=concurrency)
    if _configured.pinned_gpu is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = _configured.pinned_gpu
    return _configured


class NotConfigured(RuntimeError):
    """A worker's task or hook ran in a process that never said which worker it is."""


def current() -> WorkerContext:
    """This process's worker context, as ``configure`` set it.

    Never guessed: a CPU default would let a GPU worker's pool, or a process that is no worker at all,
    run jobs as a CPU worker.
    """
    if _configured is None:
        raise NotConfigured("this process is not a configured worker: call gradci.worker.context.configure("
                            "device, name=..., settings=...) first, as `gradci worker --device ...` does "
                            "(gradci.worker.start.start_worker)")
    return _configured
