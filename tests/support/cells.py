"""Synthetic cells as a runner streams them, and a simulated GPU inventory."""
from __future__ import annotations

from typing import Any

STATUS_CYCLE = ("pass", "pass", "pass", "fail", "error", "skip", "xfail", "xpass")


def synthetic_cell(index: int, *, status: str | None = None, backend: str = "jax-rev",
                   device: str = "cpu", dtype: str = "float64") -> dict[str, Any]:
    """A cell as a runner streams it: the scenarios.cell.Cell fields plus a fingerprint, with
    values the engine produces (ingestion refuses any other)."""
    return {
        "scenario": f"scenario_{index:05d}",
        "operator": "gradient",
        "framework": "numpy" if backend == "fd" else backend.split("-")[0],
        "backend": backend,
        "mode": {"fd": "finite"}.get(backend, "forward" if backend.endswith("-fwd") else "reverse"),
        "device": device,
        "dtype": dtype,
        "status": status or STATUS_CYCLE[index % len(STATUS_CYCLE)],
        "max_abs_err": 1e-9 * index,
        "max_rel_err": 1e-10 * index,
        "atol": 1e-8,
        "rtol": 1e-6,
        "time_ms": 0.5 + index % 7,
        "first_call_ms": 20.0,
        "peak_memory_bytes": 1024 * index,
        "message": "" if index % 8 < 3 else f"cell {index}: max abs error above tolerance",
        "fingerprint": f"{index:064x}"[-64:],
    }


# Two simulated GPUs (GRADCI_DEVICE_INVENTORY): routing, per-device workers and the GPU path are
# tested through the same code as real ones.
TWO_GPUS = [
    {"name": "NVIDIA H100 80GB HBM3", "capability": "90", "memory_total": 85_520_809_984,
     "memory_free": 80_000_000_000, "driver": "550.54.15", "cuda": "12.4"},
    {"name": "NVIDIA A100-SXM4-40GB", "capability": "80", "memory_total": 42_949_672_960},
]
