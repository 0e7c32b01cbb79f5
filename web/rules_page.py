"""The rules pages of a run: each derivative rule's coverage matrix, and per file the lines cells reached.

The matrix is rule method × backend · operator, each entry the number of cells that ran the method
(none: not reached), with the engine's findings beside it; below it, where the run measured detection
power, each rule's weakest perturbation caught and each cell's smallest δ caught beside its tolerance.
The file view is a coverage service's: the file's lines that the run's cells ran, and each rule
method's source (kept in the run's rule catalog: the service keeps no checkout) with its reached
lines marked. Both are read as the run is,
through the same read access.
"""
from __future__ import annotations

import dataclasses
from collections import defaultdict
from typing import Annotated

from fastapi import APIRouter, HTTPException, Query, Request
from fastapi.responses import HTMLResponse

from gradci.services.api.access import ReadAccess
from gradci.services.api.deps import ReadSession
from gradci.services.api.runs import RunId
from gradci.services.db.rules import covered_lines, reach_counts, rule_catalog
from gradci.services.reports.rules_report import catalog_rule, summary_of
from gradci.web.power_view import run_power
from gradci.web.templating import templates

router = APIRouter(include_in_schema=False)
FilePath = Annotated[str, Query(min_length=1, max_length=1024)]


@dataclasses.dataclass(frozen=True)
class SourceLine:
    number: int
    text: str
    state: str  # "reached", "missed" (a line of the method no cell ran), "" (not a line that runs)


def ranges(numbers: list[int]) -> str:
    """``[1, 2, 3, 7, 9, 10]`` as "1-3, 7, 9-10"."""
    spans: list[list[int]] = []
    for number in numbers:
        if spans and number == spans[-1][1] + 1:
            spans[-1][1] = number
        else:
            spans.append([number, number])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)


@router.get("/runs/{run_id}/rules", response_class=HTMLResponse)
def rules_page(run_id: RunId, request: Request, session: ReadSession, access: ReadAccess):
    run = access.run(run_id)
    entries = rule_catalog(session, run.id)
    rules = [catalog_rule(entry) for entry in entries]
    counts = reach_counts(session, run.id)
    columns = sorted({(c.backend, c.operator) for c in counts})
    matrix: dict[tuple[str, str], dict[tuple[str, str], int]] = defaultdict(dict)
    for count in counts:
        cell = matrix[count.rule_id, count.method]
        cell[count.backend, count.operator] = cell.get((count.backend, count.operator), 0) + count.cells
    findings = {finding.rule.id: finding for finding in summary_of(rules, counts).findings()}
    lines = covered_lines(session, run.id)
    files = sorted({rule.file for rule in rules} | set(lines))
    rule_lines: dict[str, set[int]] = defaultdict(set)
    for rule in rules:
        for method in rule.methods:
            rule_lines[method.file].update(method.lines)
    file_rows = [{"file": file, "reached": len(lines.get(file, ())),
                  "rule_lines": len(rule_lines[file]),
                  "rule_reached": len(rule_lines[file] & set(lines.get(file, ())))} for file in files]
    return templates.TemplateResponse(request, "rules.html", {
        "run": run, "rules": rules, "columns": columns, "matrix": matrix, "findings": findings,
        "files": file_rows, "power": run_power(session, run)})


@router.get("/runs/{run_id}/rules/file", response_class=HTMLResponse)
def rules_file_page(run_id: RunId, path: FilePath, request: Request, session: ReadSession, access: ReadAccess):
    run = access.run(run_id)
    reached = covered_lines(session, run.id, path).get(path, [])
    entries = [entry for entry in rule_catalog(session, run.id) if entry.file == path
               or any(m.get("file") == path for m in entry.methods)]
    if not reached and not entries:
        raise HTTPException(404, detail=f"run {run_id} recorded no lines of {path}")
    reached_set = set(reached)
    methods = []
    for entry in entries:
        for method in entry.methods:
            if method.get("file") != path:
                continue
            runs = set(int(n) for n in method.get("lines") or ())
            source = str(method.get("source") or "").splitlines()
            first = int(method["first_line"])
            shown = [SourceLine(first + index, text, _state(first + index, runs, reached_set))
                     for index, text in enumerate(source)]
            methods.append({"rule": entry.name, "kind": entry.kind, "method": method["name"], "first_line": first,
                            "lines": shown, "reached": len(runs & reached_set), "total": len(runs)})
    methods.sort(key=lambda m: m["first_line"])
    return templates.TemplateResponse(request, "rules_file.html", {
        "run": run, "path": path, "reached": reached, "reached_ranges": ranges(reached), "methods": methods})


def _state(number: int, runs: set[int], reached: set[int]) -> str:
    if number in reached:
        return "reached"
    return "missed" if number in runs else ""
