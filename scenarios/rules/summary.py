"""Over a check: which cells reached each rule, and the rules, or their methods, that no cell reached.

The findings are the rules' own lines, beside the cells' verdicts and never in them: "not exercised by
any scenario" (no derivative method of the rule ran in any cell) and "backward exercised, jvp never"
(some of its derivative methods ran, others never: a ``jvp`` that only reverse-mode cells reached).
gradci.toml's ``[rules] unexercised`` says whether they fail a check ("failure", the default) or are
only reported ("warning").
"""
from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from gradci.scenarios.contract.cell import Cell
from gradci.scenarios.rules.discovery import SOLVER_DERIVATIVE_METHODS, Rule
from gradci.scenarios.rules.records import CellRules, LinesByFile

FAILURE, WARNING = "failure", "warning"
SEVERITIES = (FAILURE, WARNING)
NOT_EXERCISED = "not exercised by any scenario"
# Where a derivative method never ran though others did: the backends that would reach it.
WHAT_REACHES = {
    ("torch", "jvp"): "a forward-mode cell (torch-fwd, torch-func-fwd)",
    ("torch", "backward"): "a reverse-mode cell (torch-rev, torch-func-rev)",
    ("torch", "vjp"): "a reverse-mode cell (torch-rev, torch-func-rev)",
    ("jax", "jvp"): "a jax cell (jax-fwd, or a reverse one: jax-rev, jax-rev-jit)",
    ("jax", "fwd"): "a reverse-mode cell (jax-rev, jax-rev-jit)",
    ("jax", "bwd"): "a reverse-mode cell (jax-rev, jax-rev-jit)",
    ("jax", "solve"): "a forward-mode cell (jax-fwd)",
    ("jax", "transpose_solve"): "a reverse-mode cell (jax-rev, jax-rev-jit)",
    ("jax", "tangent_solve"): "a jax cell (jax-fwd, or a reverse one: jax-rev, jax-rev-jit)",
}
# The derivative methods a cell of either mode runs: jax transposes a custom_jvp rule, and custom_root's
# tangent solve, for reverse mode.
EITHER_MODE = frozenset({"jvp", "tangent_solve"})
# Those only forward mode runs (for the rest: reverse mode): custom_linear_solve's solve for tangents.
FORWARD_ONLY = frozenset({"jvp", "solve"})


def unexercised_severity(config: Mapping[str, Any]) -> str:
    """gradci.toml's ``[rules] unexercised``: "failure" (the default) or "warning"; ValueError otherwise."""
    table = config.get("rules", {})
    if not isinstance(table, dict):
        raise ValueError(f"gradci.toml: [rules] must be a table, not {type(table).__name__}")
    value = table.get("unexercised", FAILURE)
    if value not in SEVERITIES:
        raise ValueError(f"gradci.toml: [rules] unexercised must be \"failure\" or \"warning\", not {value!r}")
    return value


@dataclasses.dataclass(frozen=True)
class Reach:
    """A cell that ran a method of a rule: what a coverage matrix is made of."""

    scenario: str
    backend: str
    operator: str
    mode: str
    device: str
    dtype: str


@dataclasses.dataclass(frozen=True)
class Finding:
    rule: Rule
    text: str  # "not exercised by any scenario", "backward exercised, jvp never"
    hint: str  # what to do about it

    def line(self) -> str:
        return f"{self.rule.name} ({self.rule.kind}, {self.rule.file}): {self.text} — {self.hint}"


@dataclasses.dataclass
class RulesSummary:
    rules: list[Rule]
    reaches: dict[str, dict[str, list[Reach]]]  # rule id -> method -> the cells that ran it
    lines: LinesByFile  # every project line some cell ran

    def reached_by(self, rule: Rule, method: str) -> list[Reach]:
        return self.reaches.get(rule.id, {}).get(method, [])

    def findings(self) -> list[Finding]:
        found = []
        for rule in self.rules:
            derivative = rule.derivative_methods()
            ran = [m for m in derivative if self.reached_by(rule, m)]
            never = [m for m in derivative if m not in ran]
            if not derivative or not never:
                continue
            if not ran:
                found.append(Finding(rule, NOT_EXERCISED, _unexercised_hint(rule, self)))
            else:
                modes = sorted({reach.mode for m in ran for reach in self.reached_by(rule, m)})
                found.append(Finding(rule, f"{', '.join(ran)} exercised, {', '.join(never)} never",
                                     f"reached only by {'/'.join(modes)}-mode cells; "
                                     f"{_reaching(rule, never)} would run {', '.join(never)}"))
        return found


def summarize(rules: Iterable[Rule], cells: Iterable[tuple[Cell, CellRules]]) -> RulesSummary:
    """The rules' coverage over ``cells``, each with its record."""
    rules = list(rules)
    reaches: dict[str, dict[str, list[Reach]]] = {}
    lines: dict[str, set[int]] = {}
    for cell, record in cells:
        reach = Reach(cell.scenario, cell.backend, cell.operator, cell.mode, cell.device, cell.dtype)
        for rule_id, methods in record.rules.items():
            for method in methods:
                reaches.setdefault(rule_id, {}).setdefault(method, []).append(reach)
        for file, numbers in record.lines.items():
            lines.setdefault(file, set()).update(numbers)
    return RulesSummary(rules, reaches, {file: sorted(numbers) for file, numbers in sorted(lines.items())})


def _unexercised_hint(rule: Rule, summary: RulesSummary) -> str:
    derivative = rule.derivative_methods()
    others = [m.name for m in rule.methods if m.name not in derivative and summary.reached_by(rule, m.name)]
    if others:
        # Cells of a mode that runs its derivative methods may have run its forward already (torchdiffeq
        # solves under no_grad): another such cell would not help, a differentiated path through it would.
        able = [reach for name in others for reach in summary.reached_by(rule, name)
                if any(_mode_runs(rule, method, reach.mode) for method in derivative)]
        if able:
            backends = ", ".join(dict.fromkeys(reach.backend for reach in able))
            return (f"its {', '.join(others)} ran in {backends} cells, yet they never differentiated through it: "
                    "its output did not reach what they differentiate there (computed under no_grad, detached?)")
        return (f"its {', '.join(others)} ran, but no cell differentiated through it: "
                f"{_reaching(rule, derivative)} would")
    if rule.kind in SOLVER_DERIVATIVE_METHODS:  # the rule is the functions a call hands over, not a function to call
        return (f"no cell calls it: add a scenario whose function makes the {rule.kind} call that hands over "
                f"{rule.name} ({_lines(rule)})")
    return f"no cell calls it: add a scenario whose function calls {rule.name} ({_lines(rule)})"


def _mode_runs(rule: Rule, method: str, mode: str) -> bool:
    """Whether a cell of ``mode`` ("reverse", "forward", "forward-over-reverse") runs ``method`` of ``rule``."""
    if rule.kind.startswith("jax") and method in EITHER_MODE:
        return True
    return "forward" in mode if method in FORWARD_ONLY else "reverse" in mode


def _reaching(rule: Rule, methods: list[str]) -> str:
    framework = rule.kind.split(".")[0]
    return " or ".join(dict.fromkeys(WHAT_REACHES.get((framework, m), "a cell that differentiates it")
                                     for m in methods))


def _lines(rule: Rule) -> str:
    first = min(m.first_line for m in rule.methods)
    last = max(m.last_line for m in rule.methods)
    return f"{rule.file}:{first}-{last}"
