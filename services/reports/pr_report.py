"""The pull-request report, assembled from what the database counted (``RunFigures``).

It holds project and patch coverage against the base run, per-group coverage, regressions, fixes and
near-misses. The API, the finalizer and the dashboard share this one computation whatever the size
of the run.
"""
from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from typing import NamedTuple

from gradci.scenarios.contract.coverage import percent
from gradci.scenarios.contract.wording import count_of
from gradci.services.reports.aggregates import Group, GroupTally
from gradci.services.reports.diff import Changes
from gradci.services.reports.report_record import (
    ChangeCounts,
    CoverageStatus,
    GroupCoverage,
    ReportSubject,
    RulesSection,
    RunReport,
    StatusCounts,
    StatusTotals,
)
from gradci.services.reports.targets import Target


class RunFigures(NamedTuple):
    """A run's cells as the database summed them up, against its base run's (None: no base run)."""

    tallies: list[GroupTally]
    missing: Mapping[Group, list[str]]
    base_counts: StatusCounts | None
    changed_scenarios: list[str]
    changed_scenario_count: int
    changes: Changes


def _sum(tallies: Iterable[GroupTally], patch_only: bool = False) -> StatusCounts:
    by_status: Counter[str] = Counter()
    for tally in tallies:
        by_status[tally.status] += tally.patch_cells if patch_only else tally.cells
    return StatusCounts.of_tally(by_status)


def groups(tallies: Iterable[GroupTally], missing: Mapping[Group, list[str]]) -> list[GroupCoverage]:
    """Pass % and the first missing (failed, errored) cells per backend × device."""
    by_group: dict[Group, list[GroupTally]] = defaultdict(list)
    for tally in tallies:
        by_group[tally.backend, tally.device].append(tally)
    out = []
    for (backend, device), members in sorted(by_group.items()):
        counts = _sum(members)
        out.append(GroupCoverage(backend=backend, device=device, coverage=counts.coverage, counts=counts,
                                 missing=list(missing.get((backend, device), []))))
    return out


def build_report(subject: ReportSubject, figures: RunFigures, project_target: Target,
                 patch_target: Target, rules: RulesSection | None = None) -> RunReport:
    """The whole report of ``subject`` from its figures (and its rules section, where it has rules)."""
    head_counts = _sum(figures.tallies)
    base_coverage = figures.base_counts.coverage if figures.base_counts else None
    changes = figures.changes
    project = _project_status(head_counts.coverage, base_coverage, project_target, subject.base_sha)
    return RunReport(
        **dict(subject),
        project=with_rules(project, rules),
        patch=_patch_status(_sum(figures.tallies, patch_only=True), base_coverage, patch_target),
        totals=StatusTotals(head=head_counts, base=figures.base_counts),
        groups=groups(figures.tallies, figures.missing),
        changed_scenarios=figures.changed_scenarios,
        regressions=changes.cells["regressions"], fixes=changes.cells["fixes"],
        near_misses=changes.cells["near_misses"],
        change_counts=ChangeCounts(**changes.counts, changed_scenarios=figures.changed_scenario_count),
        rules=rules,
    )


def with_rules(project: CoverageStatus, rules: RulesSection | None) -> CoverageStatus:
    """The project status, failed by a failing rules finding (gradci.toml's ``[rules] unexercised``).

    Its words come first: GitHub cuts a status description at 140 characters.
    """
    if rules is None or not rules.failing:
        return project
    count = rules.finding_count
    return project.model_copy(update={
        "state": "failure",
        "description": f"{count_of(count, 'rule')} not fully exercised; {project.description}"})

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
    description = f"{percent(counts.coverage)} of {count_of(n_cells, 'changed cell passes', 'changed cells pass')}"
    return CoverageStatus(coverage=counts.coverage, base_coverage=base_coverage, target=resolved,
                          state=target.state(counts.coverage, base_coverage),
                          description=_with_target(description, resolved, target))
