"""Storing and reading cells' detection-power records, and the latest default-branch run that has some.

A record (``gradci.scenarios.rules.power.CellPower.to_dict``) is kept whole beside its cell, keyed like
it: a redelivered job or a shard uploaded again rewrites it. Reading joins it with the cell's stored
fields (tolerances, errors), which the record itself does not repeat.
"""
from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from sqlalchemy import and_, exists, select
from sqlalchemy.orm import Session

from gradci.scenarios.contract.cell import FIELD_NAMES, KEY_FIELDS, Cell, Status
from gradci.scenarios.rules.power import CellPower as CellPowerRecord
from gradci.services.db.models import CellPower, Result, Run, RunStatus, Trigger
from gradci.services.db.upsert import dialect_insert

BATCH_ROWS = 1000
POWER_KEY_COLUMNS = ("run_id", *KEY_FIELDS)
# Runs whose power a pull request's report may read: a push to the default branch, or cells a
# project's CI uploaded from a branch (no pull request) with ``gradci check --power``.
POWER_TRIGGERS = (Trigger.push.value, Trigger.upload.value)
FINISHED_WITH_CELLS = (RunStatus.passed.value, RunStatus.failed.value)


def power_row(run_id: int, cell: Mapping[str, Any], record: Mapping[str, Any]) -> dict[str, Any]:
    """The row of one cell's record (``CellPower.to_dict``, or what an upload validated)."""
    smallest = CellPowerRecord.from_dict(dict(record)).smallest_delta  # recomputed: not the sender's word
    return {"run_id": run_id, **{name: str(cell.get(name) or "") for name in KEY_FIELDS},
            "smallest_delta": smallest, "record": dict(record)}


def record_power(session: Session, rows: Sequence[dict[str, Any]]) -> None:
    """Store the rows, each replacing the record its cell had."""
    unique = list({tuple(row[name] for name in POWER_KEY_COLUMNS): row for row in rows}.values())
    insert = dialect_insert(session, CellPower.__table__)
    statement = insert.on_conflict_do_update(
        index_elements=list(POWER_KEY_COLUMNS),
        set_={"smallest_delta": insert.excluded.smallest_delta, "record": insert.excluded.record})
    for start in range(0, len(unique), BATCH_ROWS):
        session.execute(statement, unique[start:start + BATCH_ROWS])


def as_cell(result: Result) -> Cell:
    """The engine's cell of a stored result (what ``summarize_power`` reads of it)."""
    fields = {name: getattr(result, name) for name in FIELD_NAMES}
    return Cell(**{**fields, "status": Status(fields["status"])})


def _joined(run_id: int):
    on = and_(Result.run_id == CellPower.run_id, *(getattr(Result, name) == getattr(CellPower, name)
                                                   for name in KEY_FIELDS))
    return select(Result, CellPower).join(CellPower, on).where(CellPower.run_id == run_id)


def cell_powers(session: Session, run_id: int) -> Iterator[tuple[Result, CellPower]]:
    """The run's measured cells with their records, the weakest detectors (largest smallest δ) first."""
    query = _joined(run_id).order_by(CellPower.smallest_delta.desc().nulls_first(), Result.scenario,
                                     Result.backend, Result.device, Result.dtype)
    rows = session.execute(query.execution_options(yield_per=500))
    yield from ((result, power) for result, power in rows)


def power_of_cell(session: Session, result: Result) -> CellPower | None:
    return session.scalar(select(CellPower).where(
        CellPower.run_id == result.run_id, *(getattr(CellPower, name) == getattr(result, name)
                                             for name in KEY_FIELDS)))


def has_power(session: Session, run_id: int) -> bool:
    return bool(session.scalar(select(exists().where(CellPower.run_id == run_id))))


def latest_power_run(session: Session, repository_id: int | None) -> Run | None:
    """The repository's latest finished run of a branch (no pull request) that measured detection power."""
    if repository_id is None:
        return None
    query = (select(Run).where(Run.repository_id == repository_id, Run.pr_number.is_(None),
                               Run.trigger.in_(POWER_TRIGGERS), Run.status.in_(FINISHED_WITH_CELLS),
                               exists().where(CellPower.run_id == Run.id))
             .order_by(Run.id.desc()).limit(1))
    return session.scalar(query)
