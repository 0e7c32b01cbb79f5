"""Finite-difference references kept from default-branch runs, and found again for later runs.

A reference is stored with the dependency record of its computation (``dependency_records``, by
digest): what a later run must find unchanged to use it. Only trusted runs store (the worker decides:
``gradci.worker.reference_carrying``); any run of the repository may read.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Collection, Iterable, Mapping
from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from gradci.services.db.dependencies import record_digest, store_records
from gradci.services.db.models import CarriedReference, DependencyRecord
from gradci.services.db.upsert import dialect_insert

# The latest references of one scenario looked at: its own, at x and at its second point, over a few
# default-branch commits (older ones are no likelier to be valid than the newest).
PER_SCENARIO = 8


@dataclasses.dataclass(frozen=True)
class StoredReference:
    scenario: str
    cache_key: str
    payload: bytes
    depends: Mapping[str, Any]
    run_id: int
    sha: str | None


def keep_references(session: Session, repository_id: int, run_id: int, sha: str | None,
                    references: Iterable[tuple[str, str, bytes, Mapping[str, Any]]]) -> int:
    """Store (scenario, cache key, payload, stamped dependency record) rows; one already there stays.

    A reference computed again from the same inputs has the same record: it is stored once. Of each
    scenario's references, only the ``PER_SCENARIO`` newest are kept (the only ones ever read).
    Returns how many rows were given.
    """
    rows: list[dict[str, Any]] = []
    records: dict[str, Mapping[str, Any]] = {}
    scenarios: set[str] = set()
    for name, cache_key, payload, depends in references:
        scenario = name[:255]  # the column's width
        scenarios.add(scenario)
        digest = record_digest(depends)
        records[digest] = depends
        rows.append({"repository_id": repository_id, "scenario": scenario, "cache_key": cache_key,
                     "depends_digest": digest, "payload": payload, "run_id": run_id, "sha": sha})
    if not rows:
        return 0
    store_records(session, records)
    statement = dialect_insert(session, CarriedReference.__table__).on_conflict_do_nothing(
        index_elements=["repository_id", "cache_key", "depends_digest"])
    session.execute(statement, rows)
    for scenario in scenarios:  # only the newest are ever read: the rest go
        newest = (select(CarriedReference.id).where(CarriedReference.repository_id == repository_id,
                                                     CarriedReference.scenario == scenario)
                  .order_by(CarriedReference.id.desc()).limit(PER_SCENARIO))
        session.execute(delete(CarriedReference).where(
            CarriedReference.repository_id == repository_id, CarriedReference.scenario == scenario,
            CarriedReference.id.not_in(newest.scalar_subquery())))
    return len(rows)


def stored_references(session: Session, repository_id: int, scenarios: Collection[str]) -> list[StoredReference]:
    """The latest references kept for these scenarios of the repository, newest first, with their records."""
    found: list[StoredReference] = []
    for scenario in sorted(set(scenarios)):
        rows = session.execute(
            select(CarriedReference.scenario, CarriedReference.cache_key, CarriedReference.payload,
                   DependencyRecord.record, CarriedReference.run_id, CarriedReference.sha)
            .join(DependencyRecord, DependencyRecord.digest == CarriedReference.depends_digest)
            .where(CarriedReference.repository_id == repository_id, CarriedReference.scenario == scenario)
            .order_by(CarriedReference.id.desc()).limit(PER_SCENARIO))
        found += [StoredReference(*row) for row in rows]
    return found


def scenarios_with_references(session: Session, repository_id: int) -> set[str]:
    """The repository's scenarios some reference is kept for."""
    return set(session.scalars(select(CarriedReference.scenario).distinct()
                               .where(CarriedReference.repository_id == repository_id)))
