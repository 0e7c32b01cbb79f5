"""What a report needs to know about one run's cells, asked of the database as aggregates.

Counts per backend × device × status (and whether the cell's scenario is in the patch), each group's
first missing cells, the scenarios the pull request changed. Nothing here loads every cell of a run:
a run may hold a million.
"""
from __future__ import annotations

from collections import defaultdict
from typing import Any, NamedTuple

from sqlalchemy import Select, and_, false, func, select
from sqlalchemy.orm import Session, aliased

from gradci.scenarios.contract.coverage import MISSING
from gradci.services.db.models import Result, ScenarioCatalogEntry

Group = tuple[str, str]  # backend, device


class GroupTally(NamedTuple):
    """Cells of one backend × device × status, and how many of them belong to changed scenarios."""

    backend: str
    device: str
    status: str
    cells: int
    patch_cells: int


def changed_scenario_names(head_id: int, base_id: int | None) -> Select[Any]:
    """Names of the scenarios the pull request added or changed.

    Changed: fingerprint absent or different in the base run. Without a base run nothing counts as
    changed.
    """
    head, base = aliased(ScenarioCatalogEntry), aliased(ScenarioCatalogEntry)
    if base_id is None:
        return select(head.name).where(false())
    return (select(head.name)
            .outerjoin(base, and_(base.run_id == base_id, base.name == head.name))
            .where(head.run_id == head_id, base.fingerprint.is_distinct_from(head.fingerprint)))


def changed_scenarios(session: Session, head_id: int, base_id: int | None, limit: int) -> tuple[list[str], int]:
    """The first ``limit`` changed scenarios by name, and how many there are."""
    names = changed_scenario_names(head_id, base_id).subquery()
    total = session.scalar(select(func.count()).select_from(names)) or 0
    listed = list(session.scalars(select(names.c.name).order_by(names.c.name).limit(limit)))
    return listed, total


def group_tallies(session: Session, run_id: int, base_id: int | None) -> list[GroupTally]:
    """One pass over the run's cells: counts per backend × device × status, patch cells beside them."""
    in_patch = Result.scenario.in_(changed_scenario_names(run_id, base_id))
    statement = (select(Result.backend, Result.device, Result.status, func.count(),
                        func.count().filter(in_patch))
                 .where(Result.run_id == run_id)
                 .group_by(Result.backend, Result.device, Result.status)
                 .order_by(Result.backend, Result.device))
    return [GroupTally(*row) for row in session.execute(statement)]


def missing_cells(session: Session, run_id: int, limit: int) -> dict[Group, list[str]]:
    """Each group's first ``limit`` failed and errored cells as "scenario [dtype]", in stored order."""
    rank = func.row_number().over(partition_by=(Result.backend, Result.device), order_by=Result.id)
    ranked = (select(Result.backend, Result.device, Result.scenario, Result.dtype, rank.label("rank"))
              .where(Result.run_id == run_id, Result.status.in_(MISSING))
              .subquery())
    rows = session.execute(select(ranked.c.backend, ranked.c.device, ranked.c.scenario, ranked.c.dtype)
                           .where(ranked.c.rank <= limit)
                           .order_by(ranked.c.backend, ranked.c.device, ranked.c.rank))
    missing: dict[Group, list[str]] = defaultdict(list)
    for backend, device, scenario, dtype in rows:
        missing[backend, device].append(f"{scenario} [{dtype}]")
    return missing
