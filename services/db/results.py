"""Writing checked cells: batched upserts keyed by (run, scenario, backend, device, dtype).

A job that Celery redelivers after its worker died runs its cells again; the upsert makes the
second write replace the first instead of adding a row, so a run never counts a cell twice.
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from sqlalchemy import ColumnElement
from sqlalchemy.orm import Session

from gradci.scenarios.contract.cell import FIELD_NAMES as CELL_FIELDS
from gradci.scenarios.contract.cell import FLOAT_FIELDS, INT_FIELDS, TEXT_FIELDS, UNKNOWN_WHEN_ERRORED, validate_cell
from gradci.scenarios.contract.cell import KEY_FIELDS as CELL_KEY
from gradci.services.db.models import Result, utcnow
from gradci.services.db.upsert import dialect_insert

CONFLICT_KEY = ("run_id", *CELL_KEY)
# What a rewrite of a cell replaces: everything but its key and when it was first stored.
# A carried cell's provenance (None on a fresh one): a cell re-run over a carried one is fresh again.
PROVENANCE_FIELDS = ("depends_digest", "carried_run_id", "carried_sha", "carried_reason")
UPDATED_ON_CONFLICT = (tuple(f for f in CELL_FIELDS if f not in CELL_KEY) + ("job_id", "fingerprint", "shard_id")
                       + PROVENANCE_FIELDS)
# Rows per statement: well under SQLite's and PostgreSQL's bound-parameter limits.
DEFAULT_BATCH_SIZE = 1000


def _finite_or_none(value: Any) -> float | None:
    if value is None:
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def result_row(cell: Any, *, run_id: int, job_id: int | None = None, shard_id: int | None = None,
               provenance: bool = False) -> dict[str, Any]:
    """One results row from a ``gradci.scenarios.contract.cell.Cell`` or a mapping of its fields.

    A mapping is what a runner streams. An optional ``fingerprint`` key is kept, and with ``provenance``
    the ``PROVENANCE_FIELDS`` (only the service's own writers say where a cell came from: an upload's
    or a runner's word on it is dropped); unknown keys are ignored. A cell the engine could never produce raises
    ``gradci.scenarios.contract.cell.InvalidCell`` saying which field is wrong.
    """
    fields: Mapping[str, Any] = cell.to_dict() if hasattr(cell, "to_dict") else cell
    validate_cell(fields)
    row = {name: fields.get(name) for name in CELL_FIELDS}
    for name in FLOAT_FIELDS:
        row[name] = _finite_or_none(row[name])
    for name in INT_FIELDS:
        value = row[name]
        row[name] = None if value is None else int(value)
    for name in (*UNKNOWN_WHEN_ERRORED, *TEXT_FIELDS):
        row[name] = row[name] or ""
    row.update(run_id=run_id, job_id=job_id, shard_id=shard_id, fingerprint=fields.get("fingerprint"),
               created_at=utcnow(), **{name: fields.get(name) if provenance else None for name in PROVENANCE_FIELDS})
    return row


def _batches(rows: Iterable[dict[str, Any]], size: int) -> Iterator[list[dict[str, Any]]]:
    """Batches with unique keys, a later duplicate of a key replacing the earlier one within its batch.

    PostgreSQL refuses to update the same row twice in one statement.
    """
    batch: dict[tuple[Any, ...], dict[str, Any]] = {}
    for row in rows:
        key = tuple(row[name] for name in CONFLICT_KEY)
        batch.pop(key, None)
        batch[key] = row
        if len(batch) >= size:
            yield list(batch.values())
            batch = {}
    if batch:
        yield list(batch.values())


def upsert_results(
    session: Session,
    run_id: int,
    cells: Iterable[Any],
    *,
    job_id: int | None = None,
    shard_id: int | None = None,
    batch_size: int = DEFAULT_BATCH_SIZE,
    replace_only_if: ColumnElement[bool] | None = None,
    provenance: bool = False,
) -> int:
    """Insert or replace ``cells`` of ``run_id``; returns the number of rows written.

    The cells are checked by ``job_id``, or brought by the upload shard ``shard_id``. The caller commits
    (so a job can store its results and its status in one transaction). ``replace_only_if``: a stored
    cell is replaced only where this holds when the statement runs (``gradci.services.db.jobs.held_by``:
    its writer still holds its job). ``provenance``: the cells' ``PROVENANCE_FIELDS`` are the service's
    own (``result_row``).
    """
    table = Result.__table__
    insert = dialect_insert(session, table)
    statement = insert.on_conflict_do_update(
        index_elements=[table.c[name] for name in CONFLICT_KEY],
        set_={name: insert.excluded[name] for name in UPDATED_ON_CONFLICT},
        where=replace_only_if,
    )
    rows = (result_row(cell, run_id=run_id, job_id=job_id, shard_id=shard_id, provenance=provenance) for cell in cells)
    written = 0
    for batch in _batches(rows, batch_size):
        session.execute(statement, batch)
        written += len(batch)
    return written
