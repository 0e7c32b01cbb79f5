"""The rule-coverage record of one cell: which rules' methods it ran, and which project lines.

It travels with the cell's result as plain JSON (``to_dict``), beside the cell's fields, never inside
its verdict: ``{"rules": {rule id: [methods]}, "lines": {file: [line, ...]}}``. Files are relative to
the project's root and rule ids are ``file::qualified name``, so that two commits' records compare
rule by rule and line by line. A store keeps it as it is; ``from_dict`` reads it back.
"""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gradci.scenarios.rules.discovery import Rule

LinesByFile = dict[str, list[int]]
# The functions handed to jax's solvers that served a cell's derivatives: (file, first line, role).
Used = set[tuple[str, int, str]]
# The key under which a runner's cell record carries it (``gradci.worker.runner_child``).
RECORD_KEY = "rule_coverage"


@dataclasses.dataclass(frozen=True)
class CellRules:
    rules: dict[str, list[str]]  # rule id -> the methods of it the cell ran, in the rule's order
    lines: LinesByFile

    @classmethod
    def of(cls, lines: LinesByFile, rules: list[Rule], used: Used | None = None) -> CellRules:
        """The record of a cell that ran ``lines``, over the project's ``rules``.

        ``used``: the solvers' functions that served its derivatives (``Rule.reached``); None where
        that was not watched.
        """
        reached = {rule.id: rule.reached(lines, used) for rule in rules}
        return cls({rule_id: methods for rule_id, methods in reached.items() if methods}, lines)

    def to_dict(self) -> dict[str, Any]:
        return {"rules": self.rules, "lines": self.lines}

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> CellRules:
        data = data or {}
        return cls({str(k): [str(m) for m in v] for k, v in (data.get("rules") or {}).items()},
                   {str(k): [int(n) for n in v] for k, v in (data.get("lines") or {}).items()})
