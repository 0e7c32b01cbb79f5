"""The record of one checked cell: scenario × backend × device × dtype."""
from __future__ import annotations

import dataclasses
import math
from typing import Any

STATUSES = ("pass", "fail", "error", "skip", "xfail", "xpass")
# Statuses that make a check (and `gradci check`) unsuccessful.
FAILING = frozenset({"fail", "error", "xpass"})


@dataclasses.dataclass
class Cell:
    scenario: str
    operator: str
    framework: str
    backend: str
    mode: str
    device: str
    dtype: str
    status: str
    max_abs_err: float | None = None
    max_rel_err: float | None = None
    atol: float | None = None
    rtol: float | None = None
    time_ms: float | None = None
    first_call_ms: float | None = None
    peak_memory_bytes: int | None = None
    message: str = ""

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe: NaN and infinite errors become None with the message saying why."""
        out = dataclasses.asdict(self)
        for key, value in out.items():
            if isinstance(value, float) and not math.isfinite(value):
                out[key] = None
        return out

    @property
    def key(self) -> tuple[str, str, str, str]:
        return (self.scenario, self.backend, self.device, self.dtype)
