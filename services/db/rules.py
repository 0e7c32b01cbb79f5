"""Storing and reading a run's rule coverage: its rules, the cells that ran them, the lines they ran.

Written in batches as a job's cells are stored, idempotently: a rule or a (rule, method, cell) reach
already stored is left as it is, and a part's (a job's) covered lines are rewritten whole. Read with a
few statements whatever the number of cells: reaches counted by the database, lines per file.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from gradci.services.db.models import CoveredLines, RuleCatalogEntry, RuleReach
from gradci.services.db.upsert import dialect_insert

BATCH_ROWS = 1000  # rows per statement: under SQLite's and PostgreSQL's bound-parameter limits
REACH_KEY = ("run_id", "rule_id", "method", "scenario", "backend", "device", "dtype")
CELL_AXES = ("scenario", "backend", "operator", "mode", "device", "dtype")


def _batches(rows: Sequence[dict[str, Any]]) -> Iterator[Sequence[dict[str, Any]]]:
    for start in range(0, len(rows), BATCH_ROWS):
        yield rows[start:start + BATCH_ROWS]


def record_rules(session: Session, run_id: int, rules: Iterable[Mapping[str, Any]]) -> None:
    """The rules (``Rule.to_dict``, methods perhaps with their ``source``) of the run's checkout; idempotent."""
    rows = {rule["id"]: {"run_id": run_id, "rule_id": str(rule["id"])[:1024], "kind": str(rule["kind"])[:64],
                         "name": str(rule["name"])[:512], "file": str(rule["file"])[:1024],
                         "methods": list(rule["methods"])} for rule in rules}
    insert = dialect_insert(session, RuleCatalogEntry.__table__)
    for batch in _batches(list(rows.values())):
        session.execute(insert.on_conflict_do_nothing(index_elements=["run_id", "rule_id"]), batch)


def reach_rows(run_id: int, cell: Mapping[str, Any], record: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The reaches of one cell (its fields) from its rule-coverage record (``CellRules.to_dict``)."""
    axes = {axis: str(cell.get(axis) or "") for axis in CELL_AXES}
    return [{"run_id": run_id, "rule_id": str(rule_id)[:1024], "method": str(method)[:32], **axes}
            for rule_id, methods in (record.get("rules") or {}).items() for method in methods]


def record_reaches(session: Session, rows: Sequence[dict[str, Any]]) -> None:
    insert = dialect_insert(session, RuleReach.__table__)
    statement = insert.on_conflict_do_nothing(index_elements=list(REACH_KEY))
    for batch in _batches(_unique(rows)):
        session.execute(statement, batch)


def _unique(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    # PostgreSQL refuses to touch one row twice in a statement: one row per key.
    return list({tuple(row[name] for name in REACH_KEY): row for row in rows}.values())


def record_lines(session: Session, run_id: int, part: str, lines: Mapping[str, Iterable[int]]) -> None:
    """The lines of each file that the cells of ``part`` (a job) ran so far: its rows rewritten whole."""
    rows = [{"run_id": run_id, "part": part, "file": file[:1024], "lines": sorted(set(numbers))}
            for file, numbers in lines.items()]
    insert = dialect_insert(session, CoveredLines.__table__)
    statement = insert.on_conflict_do_update(index_elements=["run_id", "part", "file"],
                                             set_={"lines": insert.excluded.lines})
    for batch in _batches(rows):
        session.execute(statement, batch)


# --- reading ---------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class ReachCount:
    """How many cells of one backend × operator (and mode) ran one method of a rule."""

    rule_id: str
    method: str
    backend: str
    operator: str
    mode: str
    cells: int


def rule_catalog(session: Session, run_id: int) -> list[RuleCatalogEntry]:
    return list(session.scalars(select(RuleCatalogEntry).where(RuleCatalogEntry.run_id == run_id)
                                .order_by(RuleCatalogEntry.file, RuleCatalogEntry.rule_id)))


def reach_counts(session: Session, run_id: int) -> list[ReachCount]:
    """Cells per rule, method, backend, operator and mode: counted by the database."""
    query = (select(RuleReach.rule_id, RuleReach.method, RuleReach.backend, RuleReach.operator, RuleReach.mode,
                    func.count())
             .where(RuleReach.run_id == run_id)
             .group_by(RuleReach.rule_id, RuleReach.method, RuleReach.backend, RuleReach.operator, RuleReach.mode)
             .order_by(RuleReach.rule_id, RuleReach.method, RuleReach.backend, RuleReach.operator))
    return [ReachCount(*row) for row in session.execute(query)]


def covered_lines(session: Session, run_id: int, file: str | None = None) -> dict[str, list[int]]:
    """The lines of each file (or of ``file``) that some cell of the run ran: the union of its parts'."""
    query = select(CoveredLines.file, CoveredLines.lines).where(CoveredLines.run_id == run_id)
    if file is not None:
        query = query.where(CoveredLines.file == file)
    found: dict[str, set[int]] = {}
    for name, lines in session.execute(query.execution_options(yield_per=500)):
        found.setdefault(name, set()).update(int(n) for n in lines or ())
    return {name: sorted(numbers) for name, numbers in sorted(found.items())}
