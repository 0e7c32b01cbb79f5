"""The records that travel beside cells on their way to the database: rule coverage, detection power.

A job's cells (from the runner) and an upload shard's (from a project's CI) go through the same
buffer. Each cell record carries its rule-coverage record under ``RECORD_KEY``
(``gradci.scenarios.rules.records``); it is taken off the cell here (the results table keeps the cell's
verdict only) and stored in the same transaction as the cells: the reaches of each cell, the lines the
job's cells ran so far (one row per file, rewritten), and the rules the runner named that the run's
catalog lacks (a class made inside a function exists only once a cell made it). A cell measured for
detection power (a run of a default branch whose repository has it on) carries its power record under
``POWER_KEY`` too: taken off likewise, held to ``record_schema.UploadedPower`` (the runner ran the
repository's code: a record it cannot be is dropped, the cell kept) and stored beside the cell
(``gradci.services.db.power``).
"""
from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import ValidationError
from sqlalchemy.orm import Session

from gradci.scenarios.rules.power import POWER_KEY
from gradci.scenarios.rules.records import RECORD_KEY
from gradci.services.db.power import power_row, record_power
from gradci.services.db.record_schema import UploadedPower
from gradci.services.db.rules import reach_rows, record_lines, record_reaches, record_rules

log = logging.getLogger(__name__)


class CellRecordsBuffer:
    """What a part's (a job's, a shard's) buffered cells ran, until the transaction that stores them commits."""

    def __init__(self, run_id: int, part: str) -> None:
        self.run_id, self.part = run_id, part
        self.reaches: list[dict[str, Any]] = []
        self.lines: dict[str, set[int]] = {}  # every line the job's cells ran so far
        self.changed_files: set[str] = set()
        self.rules: dict[str, Mapping[str, Any]] = {}
        self.stored_rules: set[str] = set()
        self.powers: list[dict[str, Any]] = []

    def take(self, cell: dict[str, Any]) -> dict[str, Any]:
        """The cell without its record, which is kept here."""
        record = cell.pop(RECORD_KEY, None)
        power = cell.pop(POWER_KEY, None)
        if power is not None:
            try:
                self.powers.append(power_row(self.run_id, cell, UploadedPower.model_validate(power).record()))
            except ValidationError as exc:
                log.warning("run %s: the power record of cell %r is dropped: %s", self.run_id,
                            str(cell.get("scenario"))[:200], str(exc).splitlines()[0])
        if isinstance(record, Mapping):
            self.reaches += reach_rows(self.run_id, cell, record)
            for file, numbers in (record.get("lines") or {}).items():
                known = self.lines.setdefault(str(file), set())
                before = len(known)
                known.update(int(n) for n in numbers)
                if len(known) != before:
                    self.changed_files.add(str(file))
        return cell

    def add_rules(self, rules: Iterable[Mapping[str, Any]]) -> None:
        for rule in rules:
            if rule.get("id") not in self.stored_rules:
                self.rules[str(rule["id"])] = rule

    def store(self, session: Session) -> None:
        """Write what is pending, in the caller's transaction (``committed`` once it commits)."""
        if self.rules:
            record_rules(session, self.run_id, self.rules.values())
        if self.reaches:
            record_reaches(session, self.reaches)
        if self.changed_files:
            record_lines(session, self.run_id, self.part, {file: self.lines[file] for file in self.changed_files})
        if self.powers:
            record_power(session, self.powers)

    def committed(self) -> None:
        self.stored_rules.update(self.rules)
        self.rules, self.reaches, self.changed_files, self.powers = {}, [], set(), []
