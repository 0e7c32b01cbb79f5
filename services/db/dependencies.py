"""Storing what each cell depended on, and reading a base run's cells to carry them into a later run.

A dependency record (``gradci.scenarios.affected``) is stored once per distinct content, keyed by its
digest; each results row names its record (``Result.depends_digest``). A carried cell is stored as a
results row of the new run with its provenance (``Result.carried_*``), its base's record and its base's
rule-coverage reaches, so that coverage and the rules section count it like a fresh one.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Collection, Mapping
from typing import Any

from sqlalchemy import insert, select
from sqlalchemy.orm import Session

from gradci.scenarios.contract.cell import FIELD_NAMES as CELL_FIELDS
from gradci.services.db.models import (
    DependencyRecord,
    Result,
    RuleCatalogEntry,
    RuleReach,
    Run,
    RunStatus,
    ScenarioCatalogEntry,
    Trigger,
    utcnow,
)
from gradci.services.db.rules import record_reaches
from gradci.services.db.upsert import dialect_insert

Group = tuple[str, str, str]  # (scenario, backend, device)
BATCH_ROWS = 1000
# Runs a base may be: finished with a verdict of every cell (an errored or cancelled run may lack some).
BASE_STATUSES = (RunStatus.passed.value, RunStatus.failed.value)
CANDIDATES = 20  # a repository's latest finished runs looked at for a base of the same matrix
REASONS_KEPT = 20  # re-run reasons kept per run (the first, by scenario)


def record_digest(record: Mapping[str, Any]) -> str:
    """The key of a dependency record: a digest of its canonical JSON."""
    text = json.dumps(record, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def store_records(session: Session, records: Mapping[str, Mapping[str, Any]]) -> None:
    """Store records by digest; one already stored is left as it is (its digest says it is the same)."""
    rows = [{"digest": digest, "record": dict(record), "created_at": utcnow()} for digest, record in records.items()]
    insert = dialect_insert(session, DependencyRecord.__table__)
    statement = insert.on_conflict_do_nothing(index_elements=["digest"])
    for start in range(0, len(rows), BATCH_ROWS):
        session.execute(statement, rows[start:start + BATCH_ROWS])


def base_run(session: Session, run: Run) -> Run | None:
    """The run whose cells ``run`` may carry: the latest finished trusted run of its source and matrix.

    Trusted: a push to the default branch (``gradci.worker.sources.trusted_run``; for the built-in
    library, any run of it), never a pull request's, an API or upload run of a repository: their code
    must not produce records a later run trusts. It must have stored dependency records.
    """
    query = select(Run).where(Run.id != run.id, Run.status.in_(BASE_STATUSES), Run.finished_at.is_not(None))
    if run.repository_id is None:
        query = query.where(Run.repository_id.is_(None))
    else:
        query = query.where(Run.repository_id == run.repository_id, Run.trigger == Trigger.push.value,
                            Run.pr_number.is_(None))
    for candidate in session.scalars(query.order_by(Run.finished_at.desc(), Run.id.desc()).limit(CANDIDATES)):
        if (candidate.matrix or {}) != (run.matrix or {}):
            continue
        recorded = select(Result.id).where(Result.run_id == candidate.id, Result.depends_digest.is_not(None)).limit(1)
        if session.scalar(recorded) is not None:
            return candidate
    return None


def base_cells(session: Session, run_id: int) -> list[dict[str, Any]]:
    """A run's cells with their dependency records (``depends``) and provenance (``carried``).

    As the engine's ``plan_carry`` takes them; each also keeps its stored fields, to be stored again as
    a carried cell. Each distinct record is read once, however many cells share it.
    """
    query = select(Result).where(Result.run_id == run_id).order_by(Result.id).execution_options(yield_per=1000)
    cells = []
    for result in session.scalars(query):
        cell: dict[str, Any] = {name: getattr(result, name) for name in CELL_FIELDS}
        cell.update(fingerprint=result.fingerprint, depends_digest=result.depends_digest)
        if result.carried_run_id is not None or result.carried_sha is not None:
            cell["carried"] = {"run": result.carried_run_id, "sha": result.carried_sha,
                               "reason": result.carried_reason}
        cells.append(cell)
    records = records_by_digest(session, {cell["depends_digest"] for cell in cells if cell["depends_digest"]})
    for cell in cells:
        if cell["depends_digest"] in records:
            cell["depends"] = records[cell["depends_digest"]]
    return cells


def records_by_digest(session: Session, digests: Collection[str]) -> dict[str, dict[str, Any]]:
    wanted, found = sorted(digests), {}
    for start in range(0, len(wanted), BATCH_ROWS):
        query = select(DependencyRecord.digest, DependencyRecord.record).where(
            DependencyRecord.digest.in_(wanted[start:start + BATCH_ROWS]))
        found.update({digest: record for digest, record in session.execute(query)})
    return found


def carried_result(cell: Mapping[str, Any]) -> dict[str, Any]:
    """The results row fields of a carried cell (from ``base_cells`` and the engine's ``carried``)."""
    carried = cell.get("carried") or {}
    fields = {name: cell.get(name) for name in CELL_FIELDS}
    return {**fields, "fingerprint": cell.get("fingerprint"), "depends_digest": cell.get("depends_digest"),
            "carried_run_id": carried.get("run"), "carried_sha": carried.get("sha"),
            "carried_reason": str(carried.get("reason") or "")[:255] or None}


def copy_reaches(session: Session, base_run_id: int, run_id: int, groups: Collection[Group]) -> int:
    """Copy the base run's rule reaches of the carried ``groups`` to ``run_id``; returns how many."""
    if not groups:
        return 0
    wanted = set(groups)
    query = select(RuleReach).where(RuleReach.run_id == base_run_id)
    rows = [{"run_id": run_id, "rule_id": reach.rule_id, "method": reach.method, "scenario": reach.scenario,
             "backend": reach.backend, "operator": reach.operator, "mode": reach.mode, "device": reach.device,
             "dtype": reach.dtype}
            for reach in session.scalars(query.execution_options(yield_per=1000))
            if (reach.scenario, reach.backend, reach.device) in wanted]
    record_reaches(session, rows)
    return len(rows)


def copy_catalogs(session: Session, base_run_id: int, run_id: int) -> None:
    """Give ``run_id`` the base run's scenario and rule catalogs (a run carried whole lists nothing itself)."""
    for model in (ScenarioCatalogEntry, RuleCatalogEntry):
        columns = [column.key for column in model.__table__.columns if column.key not in ("id", "run_id")]
        rows = [{"run_id": run_id, **{name: getattr(entry, name) for name in columns}}
                for entry in session.scalars(select(model).where(model.run_id == base_run_id))]
        if rows and not session.scalar(select(model.id).where(model.run_id == run_id).limit(1)):
            session.execute(insert(model), rows)


@dataclasses.dataclass
class CarrySummary:
    """What a run's plan carried, for its page, its report and the API (``Run.carry``)."""

    base_run_id: int | None = None
    base_sha: str | None = None
    carried: int = 0  # cells
    rerun: int = 0  # groups (scenario, backend, device) re-run
    reasons: list[dict[str, str]] = dataclasses.field(default_factory=list)  # the first, by scenario
    full: str | None = None  # why the run ran everything (None: it carried what it could)

    @classmethod
    def of(cls, base_run_id: int, base_sha: str | None, carried: int, rerun: Mapping[Group, str]) -> CarrySummary:
        reasons = [{"scenario": s, "backend": b, "device": d, "reason": why}
                   for (s, b, d), why in sorted(rerun.items())[:REASONS_KEPT]]
        return cls(base_run_id, base_sha, carried, len(rerun), reasons)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> CarrySummary | None:
        if not data:
            return None
        names = {field.name for field in dataclasses.fields(cls)}
        return cls(**{name: value for name, value in data.items() if name in names})

