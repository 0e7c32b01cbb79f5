"""What this process counted in the cells of finished runs, remembered.

A run that passed or failed never changes again: its last job finished before the run did, so its
cells are final, and so are their counts per status. Counting a million cells takes the database a
noticeable while on every runs list; remembering the counts makes it a lookup. Only the ``SIZE``
most recently used are kept. (A finished run's report is stored in the database instead, when the
run is finalised: ``gradci.services.reports.run_report.store_report``.)
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable, Sequence
from typing import Any, TypeVar

from sqlalchemy import Engine
from sqlalchemy.orm import Session

from gradci.services.db import queries
from gradci.services.db.models import Run, RunStatus

T = TypeVar("T")
SIZE = 64
FINAL = frozenset({RunStatus.passed.value, RunStatus.failed.value,  # runs whose cells are final
                   RunStatus.skipped.value})



class RecentlyUsed:
    """The ``size`` values most recently used, by key, shared by the threads of this process."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._values: OrderedDict[Hashable, Any] = OrderedDict()
        self._lock = threading.Lock()

    def recall(self, key: Hashable) -> Any | None:
        """The value remembered for ``key``, or None."""
        with self._lock:
            if key in self._values:
                self._values.move_to_end(key)
            return self._values.get(key)

    def remember(self, key: Hashable, value: T) -> T:
        with self._lock:
            self._values[key] = value
            self._values.move_to_end(key)
            while len(self._values) > self.size:
                self._values.popitem(last=False)
        return value


_finished = RecentlyUsed(SIZE)
recall, remember = _finished.recall, _finished.remember


def is_final(run: Run) -> bool:
    return run.status in FINAL


def runs_key(session: Session, what: str, *runs: Run | None) -> Hashable:
    """Names ``what`` of these runs in this database.

    A run id alone could name another run after the database was emptied and its ids restarted, its
    creation time with it cannot.
    """
    bind = session.get_bind()
    assert isinstance(bind, Engine), "a session bound to an engine (session_scope's)"
    return (str(bind.url), what, *((run.id, run.created_at) if run else None for run in runs))


def cell_counts(session: Session, runs: Sequence[Run]) -> dict[int, dict[str, int]]:
    """Cells per status of each run (``queries.cell_counts``, one grouped query).

    A finished run's are counted once.
    """
    keys = {run.id: runs_key(session, "cell counts", run) for run in runs if is_final(run)}
    known = {run_id: counts for run_id, key in keys.items() if (counts := recall(key)) is not None}
    counts = queries.cell_counts(session, [run.id for run in runs if run.id not in known])
    for run_id, key in keys.items():
        if run_id not in known:
            remember(key, counts[run_id])
    return {**counts, **known}
