"""The run report as a typed record: its fields follow the engine's vocabulary, and the REST API
serves and documents it with the JSON keys readers already use."""
from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from pydantic import ValidationError

from gradci.scenarios.contract.cell import STATUSES
from gradci.services.api.app import create_app
from gradci.services.db.results import upsert_results
from gradci.services.db.runs import create_run, get_or_create_repository
from gradci.services.db.session import session_scope
from gradci.services.reports.report_record import CellBrief, RunReport, StatusCounts
from gradci.services.settings import Settings

REPORT_KEYS = {"run_id", "run_status", "finished", "base_run_id", "head_sha", "base_sha", "pr_number", "project",
               "patch", "totals", "groups", "changed_scenarios", "regressions", "fixes", "near_misses",
               "change_counts", "rules", "power", "carried"}


def test_status_counts_follow_the_engine_vocabulary():
    assert tuple(field.alias or name for name, field in StatusCounts.model_fields.items()) == STATUSES
    counts = StatusCounts.of(["pass", "pass", "fail", "skip", "xpass"])
    assert counts.pass_ == 2 and counts.counted == 3 and counts.coverage == pytest.approx(200 / 3)
    assert counts.model_dump() == {"pass": 2, "fail": 1, "error": 0, "skip": 1, "xfail": 0, "xpass": 1}
    with pytest.raises(ValueError):
        StatusCounts.of(["maybe"])


def test_records_refuse_unknown_statuses_and_edits():
    brief = dict(scenario="s", backend="b", device="cpu", dtype="float64", status="pass", base_status="fail")
    with pytest.raises(ValidationError):
        CellBrief(**{**brief, "status": "flaky"})
    with pytest.raises(ValidationError):
        CellBrief(**brief).status = "fail"  # frozen: a report is built whole, never patched


def _seed_pull_request(url: str, cell_factory) -> tuple[int, int]:
    """A finished base run of 4 cells and a pull request's run of the same cells, one of them regressed."""
    statuses = ["pass", "pass", "fail", "skip"]
    with session_scope(url) as session:
        repository = get_or_create_repository(session, "file:///o/r.git", "o/r")
        base = create_run(session, repository=repository, head_sha="b" * 40)
        upsert_results(session, base.id, [cell_factory(i, status=s) for i, s in enumerate(statuses)])
        head = create_run(session, repository=repository, head_sha="h" * 40, base_sha="b" * 40, pr_number=3)
        statuses[0] = "error"
        upsert_results(session, head.id, [cell_factory(i, status=s) for i, s in enumerate(statuses)])
        base.status, head.status = "passed", "failed"
        return base.id, head.id


def test_api_serves_and_documents_the_report(clean_environment, sqlite_url, tmp_path, cell_factory):
    base_id, head_id = _seed_pull_request(sqlite_url, cell_factory)
    with TestClient(create_app(Settings(database_url=sqlite_url, workdir=tmp_path / "work",
                                        read_access="open"))) as client:
        body = client.get(f"/api/runs/{head_id}/report").json()
        schema = client.get("/openapi.json").json()
    assert set(body) == REPORT_KEYS
    assert (body["run_id"], body["run_status"], body["finished"], body["base_run_id"]) == (head_id, "failed", True,
                                                                                             base_id)
    assert body["totals"]["head"] == {"pass": 1, "fail": 1, "error": 1, "skip": 1, "xfail": 0, "xpass": 0}
    assert body["totals"]["base"]["pass"] == 2
    assert body["project"]["coverage"] == pytest.approx(100 / 3) and body["project"]["state"] == "failure"
    assert [(c["scenario"], c["base_status"], c["status"]) for c in body["regressions"]] == [
        ("scenario_00000", "pass", "error")]
    assert body["change_counts"] == {"regressions": 1, "fixes": 0, "near_misses": 0, "changed_scenarios": 0}
    assert body["groups"][0]["missing"] == ["scenario_00000 [float64]", "scenario_00002 [float64]"]
    assert RunReport.model_validate(body).model_dump(mode="json") == body  # the JSON is the record, whole

    response = schema["paths"]["/api/runs/{run_id}/report"]["get"]["responses"]["200"]["content"]
    assert response["application/json"]["schema"]["$ref"].endswith("/RunReport")
    documented = schema["components"]["schemas"]
    assert set(documented["RunReport"]["properties"]) == REPORT_KEYS
    assert set(documented["RunReport"]["required"]) == REPORT_KEYS
    assert list(documented["StatusCounts"]["properties"]) == list(STATUSES)
