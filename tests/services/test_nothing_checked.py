"""Nothing that did not run reads as a pass: a run whose every cell was skipped ends ``skipped``
with the reason, its commit statuses are never ``success``, and the pull-request comment says why."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from gradci.services.db.jobs import finish_run
from gradci.services.db.models import Repository, Run, RunStatus
from gradci.services.db.results import upsert_results
from gradci.services.db.runs import create_run
from gradci.services.db.session import session_scope
from gradci.services.github.publish import plan_statuses

pytestmark = pytest.mark.integration  # both databases


def finished_run(database_url: str, cells: list[dict[str, Any]]) -> int:
    with session_scope(database_url) as session:
        repository = Repository(full_name="alice/kernels", url="https://github.com/alice/kernels")
        session.add(repository)
        session.flush()
        run_id = create_run(session, repository=repository, head_sha="a" * 40, pr_number=7).id
        upsert_results(session, run_id, cells)
        finish_run(session, run_id)
    return run_id


def skipped(cell_factory: Callable[..., dict[str, Any]], index: int, reason: str) -> dict[str, Any]:
    return {**cell_factory(index, status="skip"), "message": reason}


def test_a_run_whose_every_cell_was_skipped_says_so_and_is_never_success(database_url: str, cell_factory):
    cells = [skipped(cell_factory, i, "no cuda worker online") for i in range(3)]
    cells.append(skipped(cell_factory, 3, "the scenario does not declare float16"))
    run_id = finished_run(database_url, cells)
    with session_scope(database_url) as session:
        run = session.get(Run, run_id)
        assert run.status == RunStatus.skipped
        assert run.error_message == ("every cell was skipped (4); the most common reason (3): no cuda worker online")
        phase, statuses, _ = plan_statuses(session, run)
    assert phase == "final" and statuses
    assert all(state == "failure" and description.startswith("Nothing checked: every cell was skipped")
               for _, state, description in statuses)


def test_one_counted_cell_is_a_verdict(database_url: str, cell_factory):
    cells = [skipped(cell_factory, 0, "no cuda worker online"), cell_factory(1, status="pass")]
    run_id = finished_run(database_url, cells)
    with session_scope(database_url) as session:
        assert session.get(Run, run_id).status == RunStatus.passed
