"""Device names, as runs, checks and workers spell them. Standard library only.

``cpu``; ``cuda`` (any GPU); ``cuda:N`` (the N-th GPU this process sees); ``cuda.smXY`` (a GPU of
compute capability X.Y, for the service's routing).
"""
from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

CPU = "cpu"
CUDA = "cuda"
DEVICE_PATTERN = re.compile(r"^(cpu|cuda|cuda:\d+|cuda\.sm\d{2,3})$")


def validate_device(device: str) -> str:
    if not isinstance(device, str) or not DEVICE_PATTERN.match(device):
        raise ValueError(f"unknown device {device!r}: expected cpu, cuda, cuda:N or cuda.smXY (e.g. cuda.sm90)")
    return device


def expand_devices(requested: Iterable[str], available: Sequence[str]) -> list[str]:
    """``cuda`` means every CUDA device of ``available`` (``cuda:0``, ``cuda:1``, …); where there is
    none it stays ``cuda``, so that its cells say why they did not run instead of vanishing."""
    out: list[str] = []
    for device in requested:
        if device == CUDA:
            out += [name for name in available if name.startswith(f"{CUDA}:")] or [CUDA]
        else:
            out.append(device)
    return list(dict.fromkeys(out))
