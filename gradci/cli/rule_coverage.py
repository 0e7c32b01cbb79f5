"""``gradci check``'s rule coverage: the records the runners send, the summary it prints, the report file.

Each cell's record (``gradci.scenarios.rules.records``) comes beside the cell from the runner; the
rules of the checkout come with each answer. The summary and its findings are printed after the
cells' tables; they never change a cell's verdict, and fail the check only as gradci.toml's
``[rules] unexercised`` says.
"""
from __future__ import annotations

import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from gradci.scenarios.contract.cell import Cell
from gradci.scenarios.rules.discovery import Rule
from gradci.scenarios.rules.records import RECORD_KEY, CellRules
from gradci.scenarios.rules.reports import write_report
from gradci.scenarios.rules.summary import FAILURE, RulesSummary, summarize

CellKey = tuple[str, str, str, str]


class RuleRecords:
    """The cells' rule-coverage records and the checkout's rules, as the runners send them."""

    def __init__(self) -> None:
        self.records: dict[CellKey, CellRules] = {}
        self.rules: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()  # runners answer from their own threads (-j)

    def take(self, cells: list[dict[str, Any]], rules: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
        """Keep the records of ``cells`` (a runner's answer) and ``rules``; the cells without them."""
        with self._lock:
            self.rules.update(rules)
            for record in cells:
                if RECORD_KEY in record:
                    key = (record["scenario"], record["backend"], record["device"], record["dtype"])
                    self.records[key] = CellRules.from_dict(record[RECORD_KEY])
        return [{name: value for name, value in record.items() if name != RECORD_KEY} for record in cells]

    def json_cells(self, cells: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """``cells`` (``Cell.to_dict``), each with its record where it has one (a later ``--base`` carries it)."""
        keyed = ((cell, (cell["scenario"], cell["backend"], cell["device"], cell["dtype"])) for cell in cells)
        return [{**cell, RECORD_KEY: self.records[key].to_dict()} if key in self.records else cell
                for cell, key in keyed]

    def summary(self, cells: Iterable[Cell]) -> RulesSummary:
        rules = sorted((Rule.from_dict(rule) for rule in self.rules.values()), key=lambda r: (r.file, r.name))
        return summarize(rules, [(cell, self.records[cell.key]) for cell in cells if cell.key in self.records])


def render_rules(summary: RulesSummary, console: Console, severity: str, selection: str = "") -> bool:
    """Print the rules' coverage and findings; whether a finding fails the check.

    ``selection``: the flags that narrowed the check ("-k cube"), under which findings are reported only.
    """
    if not summary.rules:
        # Said, not left out: a repository whose rules are an installed package's sees why none is listed.
        console.print("rules: no derivative rule (torch.autograd.Function, jax.custom_vjp, jax.custom_jvp, "
                      "torch.library custom op, a solve handed to jax.lax.custom_linear_solve or custom_root) "
                      "is defined in this repository's own files; rules in installed "
                      "packages are not measured: check the package's own repository for them", markup=False,
                      highlight=False)
        return False
    table = Table(title="derivative rules: the cells that ran each method")
    for column in ("rule", "method", "cells", "backends", "operators", "devices", "dtypes"):
        table.add_column(column, overflow="fold", justify="right" if column == "cells" else "left")
    for rule in summary.rules:
        for number, method in enumerate(rule.methods):
            reaches = summary.reached_by(rule, method.name)
            # The kind says which hook the rule is (a custom_vjp's fwd and bwd, an autograd.Function's
            # backward, a solve a lax call hands over): the method names alone do not.
            name = f"{rule.name}\n{rule.kind}\n{rule.file}" if number == 0 else ""
            table.add_row(name, method.name, str(len(reaches)), *(_values(reaches, axis) for axis in
                                                                     ("backend", "operator", "device", "dtype")))
    console.print(table)
    findings = summary.findings()
    label = "failing" if severity == FAILURE else "warning"
    for finding in findings:
        console.print(f"{label}: {finding.line()}", markup=False, highlight=False)
    exercised = len(summary.rules) - sum(1 for f in findings if f.text.startswith("not exercised"))
    if selection:
        what = (f"reported only: this check ran a selection ({selection}), and what it left out may reach "
                "them; a check of the whole repository decides")
    elif severity == FAILURE:
        what = 'they fail the check; [rules] unexercised = "warning" in gradci.toml reports them only'
    else:
        what = 'reported only ([rules] unexercised = "warning" in gradci.toml)'

    console.print(f"rules: {exercised} of {len(summary.rules)} exercised by some cell, {len(findings)} with a finding"
                  + (f": {what}" if findings else ""), markup=False, highlight=False)
    return bool(findings) and severity == FAILURE


def write_rules_report(path: str, root: str, summary: RulesSummary) -> str:
    """The LCOV or Cobertura file of the lines the cells reached; its format."""
    files = sorted({method.file for rule in summary.rules for method in rule.methods})
    return write_report(Path(path), root, summary.lines, files)


def _values(reaches: list[Any], axis: str) -> str:
    return ", ".join(dict.fromkeys(getattr(reach, axis) for reach in reaches)) or "—"
