"""The service's side of affected cells, on the real databases: which run is a base, when a run must be
full, carried cells stored with their provenance and rule reaches, and the report's carried line."""
from __future__ import annotations

from datetime import timedelta
from typing import Any

from sqlalchemy import func, select

from gradci.services.db.dependencies import (
    CarrySummary,
    base_cells,
    base_run,
    carried_result,
    copy_reaches,
    record_digest,
    store_records,
)
from gradci.services.db.models import CarriedReference, Delivery, Result, RuleReach, Run, RunStatus, Trigger, utcnow
from gradci.services.db.results import upsert_results
from gradci.services.db.rules import record_reaches
from gradci.services.db.runs import get_or_create_repository
from gradci.services.db.session import session_scope
from gradci.services.reports.markdown import carried_line
from gradci.services.reports.run_report import carried_section
from gradci.services.settings import Settings
from gradci.worker.carrying import full_reason

URL = "file:///mirrors/Codertocat/Hello-World.git"
RECORD = {"files": {"ops.py": {"digest": "d1", "kept": ["Square.backward"]}}, "scenario": "f1",
          "environment": {"software": {}, "config": {}, "device": {}}, "sha": "a" * 40}


def cell(scenario: str, backend: str = "torch-rev", **fields: Any) -> dict[str, Any]:
    return {"scenario": scenario, "operator": "gradient", "framework": "torch", "backend": backend,
            "mode": "reverse", "device": "cpu", "dtype": "float64", "status": "pass", **fields}


def finished_run(session, *, trigger: str = Trigger.push.value, pr_number: int | None = None,
                 hours_ago: float = 1.0, recorded: bool = True, matrix: dict | None = None,
                 carry: dict | None = None, status: str = RunStatus.passed.value) -> Run:
    repository = get_or_create_repository(session, URL, "Codertocat/Hello-World")
    run = Run(repository=repository, head_sha="a" * 40, trigger=trigger, pr_number=pr_number,
              status=status, matrix=matrix or {}, carry=carry, finished_at=utcnow() - timedelta(hours=hours_ago))
    session.add(run)
    session.flush()
    digest = record_digest(RECORD)
    if recorded:
        store_records(session, {digest: RECORD})
    upsert_results(session, run.id, [cell("square/gradient", depends_digest=digest if recorded else None)],
                   provenance=True)
    return run


def new_run(session, **fields: Any) -> Run:
    repository = get_or_create_repository(session, URL, "Codertocat/Hello-World")
    run = Run(repository=repository, head_sha="c" * 40, status=RunStatus.queued.value, **fields)
    session.add(run)
    session.flush()
    return run


def test_the_base_is_the_latest_recorded_default_branch_push_of_the_same_matrix_never_a_pull_requests(database_url):
    with session_scope(database_url) as session:
        push = finished_run(session, hours_ago=5)
        # Each of these is later, and none may be a base: their code is a pull request's, or an API
        # caller's, or they have no records, another matrix, or no verdict of every cell.
        finished_run(session, trigger=Trigger.webhook.value, pr_number=2, hours_ago=4)
        finished_run(session, trigger=Trigger.api.value, hours_ago=3)
        finished_run(session, recorded=False, hours_ago=2)
        finished_run(session, matrix={"backends": ["jax-rev"]}, hours_ago=1.5)
        finished_run(session, status=RunStatus.error.value, hours_ago=1)
        for run in (new_run(session, trigger=Trigger.webhook.value, pr_number=2), new_run(session)):
            found = base_run(session, run)
            assert found is not None and found.id == push.id
        later = finished_run(session, hours_ago=0.5)
        assert base_run(session, new_run(session, pr_number=3, trigger=Trigger.webhook.value)).id == later.id


def test_a_run_is_full_when_asked_labelled_configured_or_due(database_url):
    settings = Settings(full_run_every_h=24, full_run_repos=[])
    with session_scope(database_url) as session:
        assert full_reason(session, new_run(session, options={"full": True}), settings) == \
               "asked for a full run (full)"
        repo_wide = Settings(full_run_repos=["Codertocat/*"])
        assert "GRADCI_FULL_RUN_REPOS" in full_reason(session, new_run(session), repo_wide)
        labelled = new_run(session, trigger=Trigger.webhook.value, pr_number=2)
        unlabelled = new_run(session, trigger=Trigger.webhook.value, pr_number=2)
        for run, labels in ((labelled, [{"name": "full"}, {"name": "bug"}]), (unlabelled, [{"name": "bug"}])):
            session.add(Delivery(delivery_id=f"d-{run.id}", event="pull_request", action="synchronize",
                                 payload={"pull_request": {"labels": labels}}, run_id=run.id))
        session.flush()
        assert full_reason(session, labelled, settings) == "the pull request is labelled 'full'"
        assert full_reason(session, unlabelled, settings) is None
        # The default branch: full until it has a full run, then again once that is over 24 h old.
        push = new_run(session, trigger=Trigger.push.value)
        assert full_reason(session, push, settings) == "the default branch has no full run yet"
        old_full = finished_run(session, hours_ago=30, carry=CarrySummary(full="no full run yet").to_dict())
        finished_run(session, hours_ago=2, carry=CarrySummary(base_run_id=old_full.id, carried=1).to_dict())
        assert f"run {old_full.id}) is over 24 h old" in full_reason(session, push, settings)
        no_base = finished_run(session, hours_ago=20, carry=CarrySummary().to_dict())  # ran all: full
        assert f"(run {no_base.id}) is over 10 h old" in full_reason(session, push, Settings(full_run_every_h=10))
        finished_run(session, hours_ago=3, carry=CarrySummary(full="asked").to_dict())
        assert full_reason(session, push, settings) is None
        assert "GRADCI_FULL_RUN_EVERY_H=0" in full_reason(session, push, Settings(full_run_every_h=0))
        # A pull request's or an API run carries whatever the default branch's schedule.
        assert full_reason(session, new_run(session), Settings(full_run_every_h=0)) is None


def test_carried_cells_keep_their_provenance_record_and_rule_reaches(database_url):
    with session_scope(database_url) as session:
        base = finished_run(session)
        reach = {"rule_id": "ops.py::Square", "method": "backward", "backend": "torch-rev", "operator": "gradient",
                 "mode": "reverse", "device": "cpu", "dtype": "float64"}
        record_reaches(session, [{"run_id": base.id, "scenario": s, **reach} for s in ("square/gradient", "other")])
        (stored,) = base_cells(session, base.id)
        assert stored["depends"] == RECORD and "carried" not in stored
        new = new_run(session)
        carried = {**stored, "carried": {"run": base.id, "sha": base.head_sha, "reason": "inputs unchanged"}}
        upsert_results(session, new.id, [carried_result(carried)], provenance=True)
        copied = copy_reaches(session, base.id, new.id, {("square/gradient", "torch-rev", "cpu")})
        session.flush()
        (row,) = session.scalars(select(Result).where(Result.run_id == new.id))
        assert (row.carried_run_id, row.carried_sha, row.carried_reason, row.depends_digest) == \
               (base.id, base.head_sha, "inputs unchanged", stored["depends_digest"])
        assert copied == 1 and session.scalars(select(RuleReach.scenario).where(RuleReach.run_id == new.id)).all() \
            == ["square/gradient"]
        # Carried again, a cell keeps where it was computed.
        (again,) = base_cells(session, new.id)
        assert again["carried"] == {"run": base.id, "sha": base.head_sha, "reason": "inputs unchanged"}
        # A fresh cell written over a carried one is fresh: no provenance left behind; and only the
        # service's own writers say where a cell came from (an upload's word on it is dropped).
        upsert_results(session, new.id, [{**cell("square/gradient"), **carried_result(carried)}])
        session.flush()
        session.expire_all()
        (row,) = session.scalars(select(Result).where(Result.run_id == new.id))
        assert (row.carried_run_id, row.carried_sha, row.depends_digest) == (None, None, None)


def test_the_carried_line_says_where_from_and_escapes_what_the_repository_names():
    hostile = "x`` <!-- @owner [link](http://evil) |"
    summary = CarrySummary.of(12, "abcdef0123", 7, {(hostile, "torch-rev", "cpu"): "data file `a` changed"})
    line = carried_line(carried_section(summary.to_dict()))
    assert line.startswith("**7** cells carried from run 12 at `abcdef0`, inputs unchanged; **1** re-run: ")
    assert "```x`` <!-- @owner [link](http://evil) |``` on" in line  # one code span: nothing in it renders
    assert "``data file `a` changed``" in line
    assert carried_line(carried_section(CarrySummary(full="asked for a full run (full)").to_dict())) == \
           "Every cell ran: `asked for a full run (full)`."
    assert carried_line(carried_section(None)) == "" and carried_line(carried_section(CarrySummary().to_dict())) == ""


def test_kept_references_are_stored_once_per_record_and_only_the_newest_kept(database_url):
    from gradci.services.db.carried_references import PER_SCENARIO, keep_references, stored_references

    with session_scope(database_url) as session:
        repository = get_or_create_repository(session, URL, "Codertocat/Hello-World").id
        # The same reference from the same inputs, kept by two runs: one row, the first run's.
        for run_id in (1, 2):
            keep_references(session, repository, run_id, "a" * 40, [("square/gradient", "k", b"p", RECORD)])
        [kept] = stored_references(session, repository, ["square/gradient"])
        assert (kept.run_id, kept.cache_key, kept.payload, dict(kept.depends)) == (1, "k", b"p", RECORD)
        for number in range(PER_SCENARIO + 3):  # new inputs each time (a changed helper)
            record = {**RECORD, "files": {"ops.py": {"digest": f"d{number}", "kept": []}}}
            keep_references(session, repository, 10 + number, None, [("square/gradient", "k", b"p", record)])
        newest = stored_references(session, repository, ["square/gradient", "cube/gradient"])
        assert [found.run_id for found in newest] == [10 + n for n in reversed(range(3, PER_SCENARIO + 3))]
        assert session.scalar(select(func.count()).select_from(CarriedReference)) == PER_SCENARIO  # the rest went
