"""A run's matrix as the dashboard draws it, one bounded page of rows at a time.

Scenarios (rows, grouped by family) × backend · device · dtype (columns), the families and scenarios
that need attention first. Three statements whatever the run's size: the rows' worst statuses (one
row per scenario), the columns, and the cells of the page's rows only. A finished run's rows and
columns never change: they are worked out once per filter (``finished``'s memory; the unfiltered
ones are kept with its report when it is finalised), and a page costs its cells alone. A running
run's layout is worked out again only when its cells changed: the caller names their state
(``progress``, see cell_progress), and every request of this process that names the same state —
each open tab's poll — shares one layout.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Hashable
from typing import Any, NamedTuple, TypeVar

from sqlalchemy import case, func, select
from sqlalchemy.orm import Session

from gradci.services.db.models import Result, Run, StoredReport
from gradci.services.db.queries import ATTENTION_ORDER, ResultFilter, filtered_results
from gradci.services.reports.diff import tolerance_ratio
from gradci.services.reports.finished_counts import RecentlyUsed, is_final, recall, remember, runs_key

T = TypeVar("T")
ROWS_PER_PAGE = 200
Column = tuple[str, str, str]  # backend, device, dtype
CHOICE_AXES = ("operator", "backend", "device", "dtype")

# A status's place in ATTENTION_ORDER, as SQL: the smaller, the sooner someone should look.
_ATTENTION = case({status: rank for rank, status in enumerate(ATTENTION_ORDER)}, value=Result.status)


def family_of(scenario: str) -> str:
    """The family a scenario belongs to: its name's first part ("nn/mlp/gradient" → "nn")."""
    return scenario.split("/", 1)[0]


class MatrixCell(NamedTuple):  # a tuple: a page makes thousands of them
    id: int
    status: str
    tolerance_ratio: float | None  # how much of its tolerance the cell used (diff.tolerance_ratio)


@dataclasses.dataclass(frozen=True)
class MatrixPage:
    rows: list[str]  # scenarios, grouped by family
    columns: list[Column]
    cells: dict[tuple[str, Column], MatrixCell]
    page: int  # from 1
    pages: int
    total_rows: int


# The latest layout of 64 running runs × filters: runs_key → (progress, value). Kept apart from the
# finished runs' memory, so that polls do not push their layouts out.
_live = RecentlyUsed(64)


def cell_progress(session: Session, run_id: int, counts: dict[str, int]) -> tuple[int | None, tuple[int, ...]]:
    """Names the state of a running run's cells.

    Its newest cell's id (a new cell) and its cells per status (``counts``, which the caller has: a
    redelivered cell that changed status).
    """
    newest = session.scalar(select(func.max(Result.id)).where(Result.run_id == run_id))
    return newest, tuple(counts[status] for status in sorted(counts))


def _once(session: Session, run: Run, what: str, compute: Callable[[], T], progress: Hashable | None = None) -> T:
    """``compute()``, remembered while the run's cells stay as they were.

    Remembered by this process for a finished run (its cells are final); for a running run, while its
    cells stay at ``progress`` (the latest state of each run and filter is kept, so polls do not push
    finished runs' layouts out), or without one by this session only (one request: its page and its
    filter choices share the work).
    """
    if not is_final(run) and progress is None:
        memo = session.info.setdefault("matrix", {})
        if (run.id, what) not in memo:
            memo[run.id, what] = compute()
        return memo[run.id, what]
    key = runs_key(session, what, run)
    if not is_final(run):
        known = _live.recall(key)
        if known is not None and known[0] == progress:
            return known[1]
        return _live.remember(key, (progress, compute()))[1]
    known = recall(key)
    return known if known is not None else remember(key, compute())


def _ordered_rows(session: Session, run_id: int, where: ResultFilter) -> list[str]:
    """Every scenario with a cell ``where`` admits, those that need attention first.

    Families with the worst cell first, and within a family its scenarios worst first, then by name.
    """
    worst = dict(session.execute(
        filtered_results(run_id, where).with_only_columns(Result.scenario, func.min(_ATTENTION))
        .group_by(Result.scenario)).all())
    family_worst: dict[str, int] = {}
    for scenario, rank in worst.items():
        family = family_of(scenario)
        family_worst[family] = min(rank, family_worst.get(family, rank))
    return sorted(worst, key=lambda s: (family_worst[family_of(s)], family_of(s), worst[s], s))


def _axes(session: Session, run_id: int, where: ResultFilter) -> list[tuple[str, ...]]:
    """The distinct (operator, backend, device, dtype) of the cells ``where`` admits."""
    statement = filtered_results(run_id, where).with_only_columns(
        *(getattr(Result, axis) for axis in CHOICE_AXES)).distinct()
    return sorted(tuple(row) for row in session.execute(statement))


@dataclasses.dataclass(frozen=True)
class _Layout:
    rows: list[str]  # every scenario, in the order the pages show them
    axes: list[tuple[str, ...]]  # the distinct (operator, backend, device, dtype)

    @property
    def columns(self) -> list[Column]:
        return sorted({(backend, device, dtype) for _, backend, device, dtype in self.axes})


def _computed_layout(session: Session, run_id: int, where: ResultFilter) -> _Layout:
    return _Layout(_ordered_rows(session, run_id, where), _axes(session, run_id, where))


def _stored_layout(session: Session, run_id: int) -> _Layout | None:
    record = session.scalar(select(StoredReport.matrix_layout).where(StoredReport.run_id == run_id))
    return None if record is None else _Layout(record["rows"], [tuple(axes) for axes in record["axes"]])


def _layout(session: Session, run: Run, where: ResultFilter, progress: Hashable | None) -> _Layout:
    def compute() -> _Layout:
        # A finished run's unfiltered layout was kept when it was finalised (layout_record).
        stored = _stored_layout(session, run.id) if where == ResultFilter() and is_final(run) else None
        return stored or _computed_layout(session, run.id, where)
    return _once(session, run, f"matrix layout {where}", compute, progress)


def layout_record(session: Session, run_id: int) -> dict[str, Any]:
    """The run's unfiltered layout as JSON, kept with a finished run's report (``StoredReport``)."""
    layout = _computed_layout(session, run_id, ResultFilter())
    return {"rows": layout.rows, "axes": [list(axes) for axes in layout.axes]}


def matrix_page(session: Session, run: Run, where: ResultFilter = ResultFilter(), page: int = 1,
                rows_per_page: int = ROWS_PER_PAGE, progress: Hashable | None = None) -> MatrixPage:
    """Page ``page`` of the run's matrix (an empty page past the end).

    ``progress``: for a running run, the state of its cells (cell_progress), under which its layout is
    shared between requests.
    """
    layout = _layout(session, run, where, progress)
    rows = layout.rows[(page - 1) * rows_per_page:page * rows_per_page]
    cells: dict[tuple[str, Column], MatrixCell] = {}
    if rows:
        statement = filtered_results(run.id, where).with_only_columns(
            Result.id, Result.scenario, Result.backend, Result.device, Result.dtype, Result.status,
            tolerance_ratio(Result)).where(Result.scenario.in_(rows))
        for cell_id, scenario, backend, device, dtype, status, ratio in session.execute(statement):
            cells[scenario, (backend, device, dtype)] = MatrixCell(cell_id, status, ratio)
    return MatrixPage(rows=rows, columns=layout.columns, cells=cells, page=page,
                      pages=max(1, -(-len(layout.rows) // rows_per_page)), total_rows=len(layout.rows))


def filter_choices(session: Session, run: Run, progress: Hashable | None = None) -> dict[str, list[str]]:
    """The values each filter of the run page can take in this run.

    Its families, operators, backends, devices and dtypes (all of them, whatever is filtered now).
    """
    layout = _layout(session, run, ResultFilter(), progress)
    return {"family": sorted({family_of(scenario) for scenario in layout.rows}),
            **{axis: sorted({row[index] for row in layout.axes}) for index, axis in enumerate(CHOICE_AXES)}}
