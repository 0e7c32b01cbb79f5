"""The pull-request report: project and patch coverage against the base run, regressions, fixes and
near-misses. Pure functions over cell dicts, so the API, the finalizer and tests share one computation.
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from scenarios.cell import KEY_FIELDS
from services.reports.coverage import MISSING, percent
from services.reports.model import (BRIEF_FIELDS, CellBrief, CoverageStatus, GroupCoverage, ReportSubject, RunReport,
                                    StatusCounts, StatusTotals)
from services.reports.targets import Target

CellKey = tuple[str, str, str, str]  # scenario, backend, device, dtype
# A passing cell whose error uses more than half its tolerance, and 10× more than in the base run.
NEAR_MISS_RATIO = 0.5
NEAR_MISS_GROWTH = 10.0


class RunCells(NamedTuple):
    """One side of the comparison: a run's cells and its scenarios' fingerprints (name → fingerprint)."""

    cells: Sequence[Mapping[str, Any]]
    fingerprints: Mapping[str, str]


class Changes(NamedTuple):
    regressions: list[CellBrief]
    fixes: list[CellBrief]
    near_misses: list[CellBrief]


def cell_key(cell: Mapping[str, Any]) -> CellKey:
    return tuple(cell[field] for field in KEY_FIELDS)  # type: ignore[return-value]


def tolerance_ratio(cell: Mapping[str, Any]) -> float | None:
    """How much of its tolerance a cell used: min(max_abs_err/atol, max_rel_err/rtol), since a
    component passes when either bound holds. None when the cell has no errors recorded."""
    ratios = []
    for err, tol in ((cell.get("max_abs_err"), cell.get("atol")), (cell.get("max_rel_err"), cell.get("rtol"))):
        if err is not None and tol:
            ratios.append(err / tol)
    return min(ratios) if ratios else None


def _cell_brief(cell: Mapping[str, Any], base: Mapping[str, Any]) -> CellBrief:
    return CellBrief(**{k: cell.get(k) for k in BRIEF_FIELDS}, tolerance_ratio=tolerance_ratio(cell),
                     base_status=base["status"], base_tolerance_ratio=tolerance_ratio(base))


def changed_scenarios(head_fingerprints: Mapping[str, str], base_fingerprints: Mapping[str, str]) -> set[str]:
    """Scenarios the pull request added or changed: fingerprint absent or different in the base run."""
    return {name for name, fp in head_fingerprints.items() if base_fingerprints.get(name) != fp}


def _counts(cells: Iterable[Mapping[str, Any]]) -> StatusCounts:
    return StatusCounts.of(cell["status"] for cell in cells)


def groups(cells: Iterable[Mapping[str, Any]]) -> list[GroupCoverage]:
    """Pass % and missing (failed, errored) cells per backend × device."""
    by_group: dict[tuple[str, str], list] = defaultdict(list)
    for cell in cells:
        by_group[(cell["backend"], cell["device"])].append(cell)
    out = []
    for (backend, device), members in sorted(by_group.items()):
        counts = _counts(members)
        missing = [f"{c['scenario']} [{c['dtype']}]" for c in members if c["status"] in MISSING]
        out.append(GroupCoverage(backend=backend, device=device, coverage=counts.coverage, counts=counts,
                                 missing=missing))
    return out


def _is_near_miss(cell: Mapping[str, Any], base: Mapping[str, Any]) -> bool:
    ratio, base_ratio = tolerance_ratio(cell), tolerance_ratio(base)
    return ratio is not None and ratio > NEAR_MISS_RATIO and (
        base_ratio is None or base_ratio == 0 or ratio >= NEAR_MISS_GROWTH * base_ratio)


def changes(head_cells: Iterable[Mapping[str, Any]], base_cells: Iterable[Mapping[str, Any]]) -> Changes:
    """Cells present in both runs whose status regressed or was fixed, or that passed closer to the edge."""
    base_by_key = {cell_key(c): c for c in base_cells}
    found = Changes([], [], [])
    for cell in head_cells:
        base = base_by_key.get(cell_key(cell))
        if base is None:
            continue
        if base["status"] == "pass" and cell["status"] not in ("pass", "skip"):
            found.regressions.append(_cell_brief(cell, base))
        elif base["status"] in MISSING and cell["status"] == "pass":
            found.fixes.append(_cell_brief(cell, base))
        elif cell["status"] == "pass" and _is_near_miss(cell, base):
            found.near_misses.append(_cell_brief(cell, base))
    return found


def build_report(subject: ReportSubject, head: RunCells, base: RunCells | None, project_target: Target,
                 patch_target: Target) -> RunReport:
    """The whole report of ``subject``'s cells (``head``) against its base run's (``base``, None when
    there is none: then no scenario counts as changed and nothing regresses)."""
    head_counts = _counts(head.cells)
    base_counts = _counts(base.cells) if base and base.cells else None
    base_coverage = base_counts.coverage if base_counts else None
    changed = changed_scenarios(head.fingerprints, base.fingerprints) if base else set()
    patch_counts = _counts(c for c in head.cells if c["scenario"] in changed)
    found = changes(head.cells, base.cells if base else ())
    return RunReport(
        **dict(subject),
        project=_project_status(head_counts.coverage, base_coverage, project_target, subject.base_sha),
        patch=_patch_status(patch_counts, base_coverage, patch_target),
        totals=StatusTotals(head=head_counts, base=base_counts),
        groups=groups(head.cells),
        changed_scenarios=sorted(changed),
        regressions=found.regressions, fixes=found.fixes, near_misses=found.near_misses,
    )


def _with_target(description: str, resolved: float | None, target: Target) -> str:
    if resolved is not None and not target.informational:
        return f"{description}, target {percent(resolved)}"
    return description


def _project_status(coverage, base_coverage, target: Target, base_sha) -> CoverageStatus:
    if base_coverage is not None and coverage is not None:
        description = f"{percent(coverage)} ({coverage - base_coverage:+.2f}%) compared to {(base_sha or '')[:7]}"
    else:
        description = f"{percent(coverage)} of cells pass"
    resolved = target.resolve(base_coverage)
    return CoverageStatus(coverage=coverage, base_coverage=base_coverage, target=resolved,
                          state=target.state(coverage, base_coverage),
                          description=_with_target(description, resolved, target))


def _patch_status(counts: StatusCounts, base_coverage, target: Target) -> CoverageStatus:
    resolved = target.resolve(base_coverage)
    n_cells = counts.total
    if n_cells == 0:
        return CoverageStatus(coverage=None, base_coverage=base_coverage, target=resolved, state="success",
                              description="No changed scenarios")
    description = f"{percent(counts.coverage)} of {n_cells} changed cells pass"
    return CoverageStatus(coverage=counts.coverage, base_coverage=base_coverage, target=resolved,
                          state=target.state(counts.coverage, base_coverage),
                          description=_with_target(description, resolved, target))
