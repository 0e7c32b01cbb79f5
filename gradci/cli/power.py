"""``gradci check --power``: the cells' detection-power records, the tables and lines it prints.

Each cell's record (``gradci.scenarios.rules.power``) comes beside the cell from the runner, like its
rule-coverage record. Printed after the rules' coverage: per cell, the smallest δ it caught and what
it missed; per rule, its weakest perturbation caught and a line for each perturbation no cell catches.
None of it changes a verdict or the exit code.
"""
from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Any

from rich.console import Console
from rich.table import Table

from gradci.scenarios.contract.cell import Cell
from gradci.scenarios.rules.discovery import Rule
from gradci.scenarios.rules.power import POWER_KEY, CellPower, RulePower, summarize_power

CellKey = tuple[str, str, str, str]


class PowerRecords:
    """The cells' detection-power records, as the runners send them."""

    def __init__(self) -> None:
        self.records: dict[CellKey, CellPower] = {}
        self._lock = threading.Lock()  # runners answer from their own threads (-j)

    def take(self, cells: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Keep the records of ``cells`` (a runner's answer); the cells without them."""
        with self._lock:
            for record in cells:
                if POWER_KEY in record:
                    key = (record["scenario"], record["backend"], record["device"], record["dtype"])
                    self.records[key] = CellPower.from_dict(record[POWER_KEY])
        return [{name: value for name, value in record.items() if name != POWER_KEY} for record in cells]

    def summary(self, rules: Iterable[Rule], cells: Iterable[Cell]) -> list[RulePower]:
        return summarize_power(rules, [(cell, self.records[cell.key]) for cell in cells if cell.key in self.records])

    def json_cells(self, cells: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """``cells`` (``Cell.to_dict``), each with its power record where it has one."""
        keyed = ((cell, (cell["scenario"], cell["backend"], cell["device"], cell["dtype"])) for cell in cells)
        return [{**cell, POWER_KEY: self.records[key].to_dict()} if key in self.records else cell
                for cell, key in keyed]


def render_power(powers: list[RulePower], records: PowerRecords, cells: list[Cell], console: Console) -> None:
    """Print the per-cell and per-rule tables and the perturbations no cell catches."""
    measured = [cell for cell in cells if cell.key in records.records]
    if not measured:
        console.print("detection power: no passing cell reached a rule to plant errors in", markup=False,
                      highlight=False)
        return
    table = Table(title="detection power per cell: the smallest error planted in a rule it caught")
    for column in ("scenario", "backend", "device", "dtype", "rtol", "smallest δ caught", "missed"):
        table.add_column(column, overflow="fold")
    for cell in measured:
        power = records.records[cell.key]
        delta = "—" if power.smallest_delta is None else f"{power.smallest_delta:g}"
        raised = [f"{line[:200]}{'…' if len(line) > 200 else ''}" for line in power.raised()]
        missed = power.not_measured or "; ".join(power.missed() + raised) or "—"
        table.add_row(cell.scenario, cell.backend, cell.device, cell.dtype,
                      "—" if cell.rtol is None else f"{cell.rtol:.0e}", delta, missed)
    console.print(table)
    rules = Table(title="detection power per rule: the weakest perturbation some cell caught")
    for column in ("rule", "plant", "cells", "caught by", "smallest δ caught"):
        rules.add_column(column, overflow="fold", justify="right" if column in ("cells", "caught by") else "left")
    for rule_power in powers:
        for number, plant in enumerate(rule_power.plants):
            name = f"{rule_power.rule.name}\n{rule_power.rule.file}" if number == 0 else ""
            smallest = plant.smallest_delta
            rules.add_row(name, f"{plant.method}[{plant.output}] {plant.kind}", str(len(plant.measured)),
                          str(len(plant.caught_by)), "—" if smallest is None else f"{smallest:g}")
    console.print(rules)
    for rule_power in powers:
        weakest = rule_power.weakest_caught()
        if weakest is None and not any(plant.measured for plant in rule_power.plants):
            # "none" would read as every plant missed: no cell said either way
            reasons = sorted({f"{reacher.result.outcome}: {reacher.result.note[:200]}" if reacher.result.note
                              else reacher.result.outcome for plant in rule_power.plants for reacher in plant.cells})
            console.print(f"{rule_power.rule.name}: no plant measured by any cell ({'; '.join(reasons[:3])})",
                          markup=False, highlight=False)
            continue
        console.print(f"{rule_power.rule.name}: weakest perturbation caught: {weakest or 'none'}", markup=False,
                      highlight=False)
        for line in rule_power.findings():
            console.print(f"power: {rule_power.rule.name} ({rule_power.rule.file}): {line}", markup=False,
                          highlight=False)
    unplanted = sorted({p.note for cell in measured for p in records.records[cell.key].plants
                        if p.outcome == "not planted" and p.note})
    for note in unplanted:
        console.print(f"power: some cells were not measured: {note}", markup=False, highlight=False)
