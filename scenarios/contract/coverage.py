"""Gradient coverage: the share of checked cells that passed.

coverage = pass / (pass + fail + error) × 100. Skips and expected failures (xfail) are shown but not
counted, as a coverage service leaves out lines it cannot execute; an unexpected pass (xpass) is
reported as failing by ``gradci check`` but is not a wrong derivative, so it stays out too.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping

from gradci.scenarios.contract.cell import COUNTED, STATUSES, Status

# Counted cells that did not pass: the ones that cost coverage (a group's "missing" cells).
MISSING = tuple(status for status in COUNTED if status != Status.PASS)


def status_tally(tally: Mapping[str, int]) -> dict[str, int]:
    """Cells per status from a count per status (as SQL's GROUP BY gives it), every status present."""
    unknown = set(tally) - set(STATUSES)
    if unknown:
        raise ValueError(f"unknown cell status {sorted(unknown)}")
    return {status: tally.get(status, 0) for status in STATUSES}


def status_counts(statuses: Iterable[str]) -> dict[str, int]:
    """Cells per status, every status present (zeros included)."""
    return status_tally(Counter(statuses))


def counted_cells(counts: Mapping[str, int]) -> int:
    """Cells that count towards coverage: pass, fail and error."""
    return sum(counts.get(status, 0) for status in COUNTED)


def coverage_percent(counts: Mapping[str, int]) -> float | None:
    """Percentage of counted cells that passed; None when no cell counts (nothing to measure)."""
    counted = counted_cells(counts)
    if counted == 0:
        return None
    return counts.get(Status.PASS, 0) / counted * 100.0


def run_coverage(stored: float | None, counts: Mapping[str, int]) -> float | None:
    """A run's coverage: the one stored when it was finalised; until then, what its results so far say."""
    return stored if stored is not None else coverage_percent(counts)


def percent(value: float | None) -> str:
    """A coverage as the comment, the statuses and the dashboard print it."""
    return "n/a" if value is None else f"{value:.2f}%"
