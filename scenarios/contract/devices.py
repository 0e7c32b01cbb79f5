"""Device names, as runs, checks and workers spell them. Standard library only.

``cpu``; ``cuda`` (any GPU); ``cuda:N`` (the N-th GPU this process sees); ``cuda.smXY`` (a GPU of
compute capability X.Y, for the service's routing). ``cuda:N-vs-cpu`` names the cells comparing a
GPU's results with the CPU's (``gradci.scenarios.verdict.device_agreement``).
"""
from __future__ import annotations

import contextlib
import contextvars
import re
from collections.abc import Iterable, Iterator, Sequence

CPU = "cpu"
CUDA = "cuda"
DEVICE_PATTERN = re.compile(r"^(cpu|cuda|cuda:\d+|cuda\.sm\d{2,3})$")


def validate_device(device: str) -> str:
    if not isinstance(device, str) or not DEVICE_PATTERN.match(device):
        raise ValueError(f"unknown device {device!r}: expected cpu, cuda, cuda:N or cuda.smXY (e.g. cuda.sm90)")
    return device


def expand_devices(requested: Iterable[str], available: Sequence[str]) -> list[str]:
    """Expand ``cuda`` to every CUDA device of ``available`` (``cuda:0``, ``cuda:1``, …).

    Where there is none it stays ``cuda``, so that its cells say why they did not run instead of
    vanishing.
    """
    out: list[str] = []
    for device in requested:
        if device == CUDA:
            out += [name for name in available if name.startswith(f"{CUDA}:")] or [CUDA]
        else:
            out.append(device)
    return list(dict.fromkeys(out))


# --- where a cell computes ----------------------------------------------------------------------

# The device of the cell being computed, for scenario code (``gradci.scenarios.current_device()``).
_current: contextvars.ContextVar[str] = contextvars.ContextVar("gradci_current_device", default=CPU)
AGREEMENT_SUFFIX = "-vs-cpu"


def current_device() -> str:
    """The device the cell now computing is checked on.

    "cuda:0" in a cuda cell, simulated or not; "cpu" outside cells, where the reference is computed.
    Scenario code may choose a kernel by it.
    """
    return _current.get()


@contextlib.contextmanager
def computing_on(device: str) -> Iterator[None]:
    token = _current.set(device)
    try:
        yield
    finally:
        _current.reset(token)


def simulated(device: str) -> bool:
    """A cuda device of a simulated inventory (GRADCI_DEVICE_INVENTORY): its cells compute on the CPU."""
    from gradci.scenarios.contract.simulated_gpus import simulated_gpus

    return device.startswith(CUDA) and simulated_gpus() is not None


def simulated_device_missing(device: str) -> str | None:
    """Why the simulated inventory has no ``device`` (None: it has it)."""
    from gradci.scenarios.contract.simulated_gpus import simulated_gpus

    count = len(simulated_gpus() or ())
    index = int(device.split(":")[1]) if ":" in device else 0
    return None if index < count else f"{device} is not in the simulated inventory ({count} GPUs)"


def execution_device(device: str) -> str:
    """Where a cell of ``device`` computes: the CPU for a simulated GPU, else the device itself."""
    return CPU if simulated(device) else device


def agreement_device(device: str) -> str:
    """The device name of the cells comparing ``device``'s results with the CPU's ("cuda:0-vs-cpu")."""
    return f"{device}{AGREEMENT_SUFFIX}"


def compared_device(name: str) -> str | None:
    """The GPU an agreement device compares with the CPU ("cuda:0-vs-cpu" → "cuda:0"); None otherwise."""
    return name.removesuffix(AGREEMENT_SUFFIX) if name.endswith(AGREEMENT_SUFFIX) else None


def checked_devices(name: str) -> list[str]:
    """The devices a cell's device stands for when it is checked again.

    An agreement device needs both sides ("cuda-vs-cpu" → cuda and cpu), any other device itself.
    """
    compared = compared_device(name)
    return [name] if compared is None else [compared, CPU]
