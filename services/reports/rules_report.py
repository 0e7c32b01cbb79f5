"""The report's rules section: the rules a pull request adds or changes, their cells, their findings.

A rule is the checkout's (``rule_catalog``), compared by id with the base run's: added where the base
has no rule of that id (or no catalog at all), changed where a method was added or removed or its
source digest differs. Which cells ran each method is counted by the database (``rule_reach``); the
findings are the engine's own (``gradci.scenarios.rules.summary.RulesSummary.findings``), made from
those counts, so that ``gradci check`` and the service say the same thing of the same cells.
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy.orm import Session

from gradci.scenarios.rules.discovery import Rule
from gradci.scenarios.rules.summary import WARNING, Reach, RulesSummary, unexercised_severity
from gradci.services.db.models import RuleCatalogEntry, Run
from gradci.services.db.rules import ReachCount, reach_counts, rule_catalog
from gradci.services.reports.report_record import (
    LIST_LIMIT,
    RuleChange,
    RuleEntry,
    RuleFinding,
    RuleMethodReach,
    RuleReachTally,
    RulesSection,
    Severity,
)
from gradci.services.reports.targets import CoverageState


def catalog_rule(entry: RuleCatalogEntry) -> Rule:
    return Rule.from_dict({"kind": entry.kind, "name": entry.name, "file": entry.file, "methods": entry.methods})


def _shape(entry: RuleCatalogEntry) -> dict[str, str]:
    return {str(m["name"]): str(m.get("digest") or "") for m in entry.methods}


def change_of(entry: RuleCatalogEntry, base: Mapping[str, RuleCatalogEntry] | None) -> RuleChange:
    """Added (no base rule of its id), changed (its methods or their source differ) or unchanged."""
    before = (base or {}).get(entry.rule_id)
    if before is None:
        return "added"
    return "unchanged" if _shape(before) == _shape(entry) else "changed"


def summary_of(rules: Sequence[Rule], counts: Sequence[ReachCount]) -> RulesSummary:
    """The engine's summary over the counted reaches: one Reach stands for each counted group."""
    reaches: dict[str, dict[str, list[Reach]]] = {}
    for count in counts:
        reaches.setdefault(count.rule_id, {}).setdefault(count.method, []).append(
            Reach("", count.backend, count.operator, count.mode, "", ""))
    return RulesSummary(list(rules), reaches, {})


def _severity(config: Mapping[str, Any]) -> tuple[Severity, str | None]:
    try:
        return "warning" if unexercised_severity(config) == WARNING else "failure", None
    except ValueError as exc:  # reported, and the stricter reading holds meanwhile
        return "failure", str(exc)


def _span(rule: Rule, methods: Sequence[str]) -> tuple[int, int]:
    chosen = [m for m in rule.methods if m.name in methods] or list(rule.methods)
    return min(m.first_line for m in chosen), max(m.last_line for m in chosen)


def rules_section(session: Session, run: Run, base: Run | None) -> RulesSection | None:
    """The rules section of ``run``'s report against ``base``; None where the run recorded no rule."""
    entries = rule_catalog(session, run.id)
    if not entries:
        return None
    base_entries = {e.rule_id: e for e in rule_catalog(session, base.id)} if base is not None else {}
    compared = bool(base_entries)
    changes = {e.rule_id: change_of(e, base_entries if compared else None) for e in entries}
    rules = {e.rule_id: catalog_rule(e) for e in entries}
    counts = reach_counts(session, run.id)
    by_method: dict[tuple[str, str], list[ReachCount]] = defaultdict(list)
    for count in counts:
        by_method[count.rule_id, count.method].append(count)
    summary = summary_of(list(rules.values()), counts)
    severity, config_error = _severity(run.config or {})

    findings, other_findings = [], 0
    for finding in summary.findings():
        rule = finding.rule
        change = changes[rule.id]
        if change == "unchanged":
            other_findings += 1
            continue
        never = [m for m in rule.derivative_methods() if not summary.reached_by(rule, m)]
        start, end = _span(rule, never)
        findings.append(RuleFinding(rule_id=rule.id, name=rule.name, kind=rule.kind, file=rule.file, text=finding.text,
                                    hint=finding.hint, start_line=start, end_line=end, change=change))
    touched = [rule for rule_id, rule in rules.items() if changes[rule_id] != "unchanged"]
    listed = [_entry(rule, changes[rule.id], by_method) for rule in touched[:LIST_LIMIT]]
    state: CoverageState = "failure" if findings and severity == "failure" else "success"
    return RulesSection(severity=severity, state=state, compared=compared, rule_count=len(rules),
                        changed_count=len(touched), rules=listed, findings=findings[:LIST_LIMIT],
                        finding_count=len(findings), other_findings=other_findings, config_error=config_error)


def _entry(rule: Rule, change: RuleChange, by_method: Mapping[tuple[str, str], list[ReachCount]]) -> RuleEntry:
    first, last = _span(rule, [])
    methods = []
    for method in rule.methods:
        counts = by_method.get((rule.id, method.name), [])
        tallies: dict[tuple[str, str], int] = defaultdict(int)
        for count in counts:
            tallies[count.backend, count.operator] += count.cells
        methods.append(RuleMethodReach(
            method=method.name, first_line=method.first_line, last_line=method.last_line,
            cells=sum(tallies.values()),
            by=[RuleReachTally(backend=b, operator=o, cells=n) for (b, o), n in sorted(tallies.items())]))
    return RuleEntry(rule_id=rule.id, name=rule.name, kind=rule.kind, file=rule.file, first_line=first, last_line=last,
                     change=change, methods=methods)
