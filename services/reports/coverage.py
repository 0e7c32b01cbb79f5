"""Gradient coverage: the share of checked cells that passed.

coverage = pass / (pass + fail + error) × 100. Skips and expected failures (xfail) are shown but not
counted, as a coverage service leaves out lines it cannot execute; an unexpected pass (xpass) is
reported as failing by ``gradci check`` but is not a wrong derivative, so it stays out too.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping

from services.db.models import CellStatus

CELL_STATUSES = CellStatus.values()
COUNTED = ("pass", "fail", "error")


def status_counts(statuses: Iterable[str]) -> dict[str, int]:
    """Cells per status, every status present (zeros included)."""
    tally = Counter(statuses)
    unknown = set(tally) - set(CELL_STATUSES)
    if unknown:
        raise ValueError(f"unknown cell status {sorted(unknown)}")
    return {status: tally.get(status, 0) for status in CELL_STATUSES}


def coverage_percent(counts: Mapping[str, int]) -> float | None:
    """Percentage of counted cells that passed; None when no cell counts (nothing to measure)."""
    counted = sum(counts.get(status, 0) for status in COUNTED)
    if counted == 0:
        return None
    return counts.get("pass", 0) / counted * 100.0
