"""The pull-request report: project and patch coverage against the base run, regressions, fixes and
near-misses. Pure functions over cell dicts, so the API, the finalizer and tests share one computation.
"""
from __future__ import annotations

import dataclasses
from collections import defaultdict
from typing import Any, Iterable, Mapping

from services.reports.coverage import coverage_percent, status_counts
from services.reports.targets import Target

CellKey = tuple[str, str, str, str]  # scenario, backend, device, dtype
# A passing cell whose error uses more than half its tolerance, and 10× more than in the base run.
NEAR_MISS_RATIO = 0.5
NEAR_MISS_GROWTH = 10.0


def cell_key(cell: Mapping[str, Any]) -> CellKey:
    return (cell["scenario"], cell["backend"], cell["device"], cell["dtype"])


def tolerance_ratio(cell: Mapping[str, Any]) -> float | None:
    """How much of its tolerance a cell used: min(max_abs_err/atol, max_rel_err/rtol), since a
    component passes when either bound holds. None when the cell has no errors recorded."""
    ratios = []
    for err, tol in ((cell.get("max_abs_err"), cell.get("atol")), (cell.get("max_rel_err"), cell.get("rtol"))):
        if err is not None and tol:
            ratios.append(err / tol)
    return min(ratios) if ratios else None


@dataclasses.dataclass
class CoverageStatus:
    coverage: float | None
    base_coverage: float | None
    target: float | None
    state: str
    description: str


def percent(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}%"


def _cell_brief(cell: Mapping[str, Any], base: Mapping[str, Any] | None = None) -> dict:
    out = {k: cell.get(k) for k in ("scenario", "backend", "device", "dtype", "status", "max_abs_err",
                                    "max_rel_err", "atol", "rtol", "message")}
    out["tolerance_ratio"] = tolerance_ratio(cell)
    if base is not None:
        out["base_status"] = base.get("status")
        out["base_tolerance_ratio"] = tolerance_ratio(base)
    return out


def changed_scenarios(head_fingerprints: Mapping[str, str], base_fingerprints: Mapping[str, str]) -> set[str]:
    """Scenarios the pull request added or changed: fingerprint absent or different in the base run."""
    return {name for name, fp in head_fingerprints.items() if base_fingerprints.get(name) != fp}


def groups(cells: Iterable[Mapping[str, Any]]) -> list[dict]:
    """Pass % and missing (failed, errored) cells per backend × device."""
    by_group: dict[tuple[str, str], list] = defaultdict(list)
    for cell in cells:
        by_group[(cell["backend"], cell["device"])].append(cell)
    out = []
    for (backend, device), members in sorted(by_group.items()):
        counts = status_counts(c["status"] for c in members)
        missing = [f"{c['scenario']} [{c['dtype']}]" for c in members if c["status"] in ("fail", "error")]
        out.append({"backend": backend, "device": device, "coverage": coverage_percent(counts),
                    "counts": counts, "missing": missing})
    return out


def build_report(head_cells: list[Mapping[str, Any]], base_cells: list[Mapping[str, Any]] | None,
                 head_fingerprints: Mapping[str, str], base_fingerprints: Mapping[str, str] | None,
                 project_target: Target, patch_target: Target, head_sha: str | None = None,
                 base_sha: str | None = None, pr_number: int | None = None) -> dict:
    base_cells = base_cells or []
    base_by_key = {cell_key(c): c for c in base_cells}
    head_counts = status_counts(c["status"] for c in head_cells)
    base_counts = status_counts(c["status"] for c in base_cells)
    coverage, base_coverage = coverage_percent(head_counts), (coverage_percent(base_counts) if base_cells else None)

    changed = changed_scenarios(head_fingerprints, base_fingerprints or {}) if base_fingerprints is not None else set()
    patch_cells = [c for c in head_cells if c["scenario"] in changed]
    patch_counts = status_counts(c["status"] for c in patch_cells)
    patch_coverage = coverage_percent(patch_counts)

    regressions, fixes, near_misses = [], [], []
    for cell in head_cells:
        base = base_by_key.get(cell_key(cell))
        if base is None:
            continue
        if base["status"] == "pass" and cell["status"] != "pass" and cell["status"] != "skip":
            regressions.append(_cell_brief(cell, base))
        elif base["status"] in ("fail", "error") and cell["status"] == "pass":
            fixes.append(_cell_brief(cell, base))
        elif cell["status"] == "pass":
            ratio, base_ratio = tolerance_ratio(cell), tolerance_ratio(base)
            if ratio is not None and ratio > NEAR_MISS_RATIO and (
                    base_ratio is None or base_ratio == 0 or ratio >= NEAR_MISS_GROWTH * base_ratio):
                near_misses.append(_cell_brief(cell, base))

    project = _project_status(coverage, base_coverage, project_target, base_sha)
    patch = _patch_status(patch_coverage, len(patch_cells), base_coverage, patch_target)
    return {
        "head_sha": head_sha, "base_sha": base_sha, "pr_number": pr_number,
        "project": dataclasses.asdict(project), "patch": dataclasses.asdict(patch),
        "totals": {"head": head_counts, "base": base_counts if base_cells else None},
        "groups": groups(head_cells),
        "changed_scenarios": sorted(changed),
        "regressions": regressions, "fixes": fixes, "near_misses": near_misses,
    }


def _project_status(coverage, base_coverage, target: Target, base_sha) -> CoverageStatus:
    state = target.state(coverage, base_coverage)
    resolved = target.resolve(base_coverage)
    if base_coverage is not None and coverage is not None:
        description = f"{percent(coverage)} ({coverage - base_coverage:+.2f}%) compared to {(base_sha or '')[:7]}"
    else:
        description = f"{percent(coverage)} of cells pass"
    if resolved is not None and not target.informational:
        description += f", target {percent(resolved)}"
    return CoverageStatus(coverage, base_coverage, resolved, state, description)


def _patch_status(patch_coverage, n_cells: int, base_coverage, target: Target) -> CoverageStatus:
    if n_cells == 0:
        return CoverageStatus(None, base_coverage, target.resolve(base_coverage), "success",
                              "No changed scenarios")
    state = target.state(patch_coverage, base_coverage)
    resolved = target.resolve(base_coverage)
    description = f"{percent(patch_coverage)} of {n_cells} changed cells pass"
    if resolved is not None and not target.informational:
        description += f", target {percent(resolved)}"
    return CoverageStatus(patch_coverage, base_coverage, resolved, state, description)
