"""The pull-request comment, in the shape coverage services made familiar.

Every string a pull request or an upload chooses (scenario names, backends, devices, dtypes,
messages) is set with ``gfm.code``, so that it reads as text and the report around it stays
gradci's.
"""
from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from gradci.scenarios.contract.coverage import percent
from gradci.scenarios.contract.wording import count_of, plural
from gradci.services.github_limits import COMMENT_BODY_LIMIT
from gradci.services.reports.gfm import code
from gradci.services.reports.report_record import (
    CarriedSection,
    CellBrief,
    PowerSection,
    RuleEntry,
    RuleFinding,
    RulesSection,
    RunReport,
    StatusCounts,
)

MARKER = "<!-- gradci:report -->"
LIST_LIMIT = 25  # rows per list before "and N more": the comment must stay under GitHub's limit


def _short(sha: str | None) -> str:
    return (sha or "")[:7] or "?"


def _diff_row(label: str, base: Any, head: Any, better_when: str | None, fmt=str) -> str:
    """One row of the diff block: '+' marks better, '-' worse, ' ' unchanged or neutral."""
    sign, delta = " ", ""
    if isinstance(base, (int, float)) and isinstance(head, (int, float)):
        change = head - base
        if change:
            delta = f"{change:+.2f}%" if fmt is percent else f"{change:+d}"
            if better_when == "up":
                sign = "+" if change > 0 else "-"
            elif better_when == "down":
                sign = "+" if change < 0 else "-"
    base_text = fmt(base) if base is not None else "?"
    return f"{sign} {label:<10}{base_text:>10}{fmt(head):>10}{delta:>10}"


def diff_block(report: RunReport) -> str:
    head, base = report.totals.head, report.totals.base
    pr = f"#{report.pr_number}" if report.pr_number else _short(report.head_sha)

    def count_row(label: str, count: Callable[[StatusCounts], int], better_when: str | None) -> str:
        return _diff_row(label, count(base) if base is not None else None, count(head), better_when)

    rows = [
        "@@           Gradient Coverage Diff           @@",
        f"##{'base':>16}{pr:>10}{'+/-':>10}   ##",
        "=" * 48,
        _diff_row("Coverage", report.project.base_coverage, report.project.coverage, "up", percent),
        "=" * 48,
        count_row("Cells", lambda counts: counts.counted, None),
        count_row("Passed", lambda counts: counts.pass_, "up"),
        count_row("Failed", lambda counts: counts.fail, "down"),
        count_row("Errored", lambda counts: counts.error, "down"),
    ]
    return "```diff\n" + "\n".join(rows) + "\n```"


def _cells_table(title: str, cells: list[CellBrief], total: int) -> str:
    """The first ``LIST_LIMIT`` of ``total`` changed cells (the report holds the top of the list)."""
    if not total:
        return ""
    lines = [f"**{title}** ({total})", "",
             "| scenario | backend | device | dtype | status | max abs err | max rel err | atol | rtol |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    shown = cells[:LIST_LIMIT]
    for c in shown:
        status = f"{c.base_status} → {c.status}"
        lines.append(f"| {code(c.scenario)} | {code(c.backend)} | {code(c.device)} | {code(c.dtype)} | {status} | "
                     f"{_num(c.max_abs_err)} | {_num(c.max_rel_err)} | {_num(c.atol)} | {_num(c.rtol)} |")
    if total > len(shown):
        lines.append(f"| … and {total - len(shown)} more | | | | | | | | |")
    return "\n".join(lines) + "\n"


def _words(text: str) -> str:
    """The engine's finding text ("backward exercised, jvp never"): method names and gradci's words."""
    return f"**{text}**" if re.fullmatch(r"[a-z_, ]+", text) else code(text, in_table=False)


def _lines(file: str, first: int, last: int) -> str:
    return f"{file}:{first}" if first == last else f"{file}:{first}-{last}"


def _rule_row(rule: RuleEntry) -> str:
    ran = []
    for method in rule.methods:
        by = ", ".join(f"{code(t.backend)} · {code(t.operator)} {t.cells}" for t in method.by[:6])
        more = " …" if len(method.by) > 6 else ""
        ran.append(f"{code(method.method)} {method.cells} ({by}{more})" if method.cells else f"{code(method.method)} —")
    return (f"| {code(rule.name)} {code(_lines(rule.file, rule.first_line, rule.last_line))} | {code(rule.kind)} | "
            f"{rule.change} | {'; '.join(ran)} |")


def _finding_line(finding: RuleFinding, severity: str) -> str:
    mark = "❌" if severity == "failure" else "⚠️"
    return (f"- {mark} {code(finding.name, in_table=False)} ({finding.change}) at "
            f"{code(_lines(finding.file, finding.start_line, finding.end_line), in_table=False)}: "
            f"{_words(finding.text)} — {code(finding.hint, in_table=False)}")


def rules_section(rules: RulesSection | None) -> str:
    """The rules the pull request adds or changes, the cells that ran each method, and the findings."""
    if rules is None:
        return ""
    against = "" if rules.compared else " (no base run's rules to compare with: every rule counts as added)"
    lines = ["### Rules", "",
             f"The pull request adds or changes **{rules.changed_count}** of the checkout's "
             f"{count_of(rules.rule_count, 'derivative rule')}{against}."]
    if rules.rules:
        lines += ["", "| rule | kind | change | cells that ran each method (backend · operator) |",
                  "| --- | --- | --- | --- |"]
        lines += [_rule_row(rule) for rule in rules.rules[:LIST_LIMIT]]
        if rules.changed_count > min(len(rules.rules), LIST_LIMIT):
            lines.append(f"| … and {rules.changed_count - min(len(rules.rules), LIST_LIMIT)} more | | | |")
    if rules.findings:
        n = rules.finding_count
        verdict = (plural(n, "it fails this check", "they fail this check") if rules.severity == "failure"
                   else plural(n, "it is a warning", "they are warnings")
                   + " (gradci.toml: `[rules] unexercised = \"warning\"`)")
        lines += ["", f"**{n} of these rules {plural(n, 'is', 'are')} not fully exercised**; {verdict}:", ""]
        lines += [_finding_line(finding, rules.severity) for finding in rules.findings[:LIST_LIMIT]]
        if rules.finding_count > min(len(rules.findings), LIST_LIMIT):
            lines.append(f"- … and {rules.finding_count - min(len(rules.findings), LIST_LIMIT)} more")
    elif rules.changed_count:
        lines += ["", "Every derivative method of these rules ran in some cell."]
    if rules.other_findings:
        n = rules.other_findings
        lines += ["", f"{count_of(n, 'rule')} this pull request did not change {plural(n, 'is', 'are')} not fully "
                      "exercised either (see the dashboard's rules page)."]
    if rules.config_error:
        lines += ["", f"gradci.toml: {code(rules.config_error, in_table=False)}; findings fail meanwhile."]
    return "\n".join(lines) + "\n"


# The engine's power lines are gradci's words around method names in backticks, dtypes and numbers:
# "a 1 % error in `bwd`'s second output is caught by no cell: only float32 cells reach it (rtol up to
# 1e-04)". A line with anything else in it (a name a record chose) is shown whole as code.
_POWER_WORDS = re.compile(r"(?:[A-Za-z0-9 .,%:;()+\-'=?δ≤]|`[a-z]{1,32}`)*")


def _power_line(text: str) -> str:
    return text if _POWER_WORDS.fullmatch(text) else code(text, in_table=False)


def power_section(power: PowerSection | None) -> str:
    """The perturbations planted in a rule that no cell catches, from the latest run that measured them."""
    if power is None:
        return ""
    where = ("this run" if power.own
             else f"the default branch's latest detection-power run (#{power.run_id} at "
                  f"{code(_short(power.head_sha), in_table=False)}; pull requests do not measure it)")
    lines = ["### Detection power", "",
             f"Errors planted in {count_of(power.rule_count, 'derivative rule')} by {where}."]
    if not power.findings:
        lines += ["", "Every planted perturbation was caught by some cell (a 1 % error or smaller in every scaled "
                      "output)."]
        return "\n".join(lines) + "\n"
    lines += ["", f"**{count_of(power.finding_count, 'planted perturbation is', 'planted perturbations are')} "
                  "caught by no cell** (information: no status depends on it):", ""]
    lines += [f"- {code(f.name, in_table=False)} ({code(f.file, in_table=False)}): {_power_line(f.text)}"
              for f in power.findings[:LIST_LIMIT]]
    if power.finding_count > min(len(power.findings), LIST_LIMIT):
        lines.append(f"- … and {power.finding_count - min(len(power.findings), LIST_LIMIT)} more")
    return "\n".join(lines) + "\n"
def carried_line(carried: CarriedSection | None) -> str:
    """The run's carried cells, where from, and why the others re-ran ("" when there is nothing to say)."""
    if carried is None:
        return ""
    if carried.full:
        return f"Every cell ran: {code(carried.full, in_table=False)}."
    if carried.base_run_id is None:
        return ""
    where = f"run {carried.base_run_id}" + (f" at {code(_short(carried.base_sha), in_table=False)}"
                                            if carried.base_sha else "")
    line = (f"**{carried.carried}** {plural(carried.carried, 'cell')} carried from {where}, inputs unchanged; "
            f"**{carried.rerun}** re-run")
    reasons = [f"{code(r.scenario, in_table=False)} on {code(r.backend, in_table=False)}/"
               f"{code(r.device, in_table=False)}: {code(r.reason, in_table=False)}" for r in carried.reasons]
    more = " …" if carried.rerun > len(carried.reasons) else ""
    return line + (": " + "; ".join(reasons) + more if reasons else "") + "."


def _num(value: float | None) -> str:
    return "—" if value is None else f"{value:.2g}"


def render(report: RunReport, run_url: str | None = None) -> str:
    project, patch, counts = report.project, report.patch, report.change_counts
    title = f"[gradci]({run_url}) report" if run_url else "gradci report"
    header = (f"## {title}\n\nPatch coverage is **{percent(patch.coverage)}** and project coverage is "
              f"**{percent(project.coverage)}** (head {code(_short(report.head_sha), in_table=False)} compared "
              f"to base {code(_short(report.base_sha), in_table=False)}).")
    table = ["| backend | device | pass % | missing cells |", "| --- | --- | --- | --- |"]
    for g in report.groups:
        missing = ", ".join(code(m) for m in g.missing[:10]) + (" …" if g.missing_count > 10 else "")
        table.append(f"| {code(g.backend)} | {code(g.device)} | {percent(g.coverage)} | {missing or '—'} |")
    sections = [MARKER, header, carried_line(report.carried), "\n".join(table), diff_block(report),
                rules_section(report.rules), power_section(report.power),
                _cells_table("Regressions", report.regressions, counts.regressions),
                _cells_table("Fixes", report.fixes, counts.fixes),
                _cells_table("Near misses (over half the tolerance, 10× the base error)", report.near_misses,
                             counts.near_misses)]
    body = "\n\n".join(s for s in sections if s)
    if len(body) > COMMENT_BODY_LIMIT:
        body = body[: COMMENT_BODY_LIMIT - 200] + "\n\n… (truncated: the full report is on the dashboard)"
    return body
