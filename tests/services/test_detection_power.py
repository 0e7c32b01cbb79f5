"""Detection power in the service, below its processes: the per-repository option and which runs it
reaches, each cell's record stored beside it (by a job's buffer and by an upload shard), and the
report's power section for a pull request, read from the latest default-branch run that measured it,
its user strings escaped and no status depending on it."""
from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError
from sqlalchemy import func, select

from gradci.scenarios.rules.power import CAUGHT, MISSED, SCALE, SIGN, CellPower, PlantResult
from gradci.services.db.cell_records import CellRecordsBuffer
from gradci.services.db.models import CellPower as CellPowerRow
from gradci.services.db.models import Result, RuleReach, Run, RunStatus
from gradci.services.db.power import latest_power_run
from gradci.services.db.repository_options import measures_power, power_repositories, set_power
from gradci.services.db.results import upsert_results
from gradci.services.db.rules import covered_lines, record_rules, rule_catalog
from gradci.services.db.runs import get_or_create_repository
from gradci.services.db.session import session_scope
from gradci.services.db.uploads import Commit, store_shard
from gradci.services.reports.markdown import power_section, render
from gradci.services.reports.run_report import report_for_run
from gradci.services.uploads.schema import UploadIn
from gradci.services.uploads.stream import cell_rows

REPO = "Octo/Power"
FILE = "pkg/ops.py"
TRICKY = "Mul`@octocat [x](http://evil) <!--"


def rule(name: str) -> dict[str, Any]:
    return {"id": f"{FILE}::{name}", "kind": "torch.autograd.Function", "name": name, "file": FILE,
            "methods": [{"name": "forward", "file": FILE, "first_line": 3, "lines": [4, 5], "digest": "a1"},
                        {"name": "backward", "file": FILE, "first_line": 7, "lines": [8, 9], "digest": "a2"}]}


def cell(scenario: str, dtype: str = "float64", **fields: Any) -> dict[str, Any]:
    return {"scenario": scenario, "operator": "gradient", "framework": "torch", "backend": "torch-rev",
            "mode": "reverse", "device": "cpu", "dtype": dtype, "status": "pass", "rtol": 1e-7, "atol": 1e-9,
            "max_abs_err": 1e-12, "max_rel_err": 1e-11, **fields}


def power_record(name: str, first_caught: float | None) -> dict[str, Any]:
    """A cell that caught the first output scaled down to ``first_caught`` and missed the second output."""
    rule_id = f"{FILE}::{name}"
    plants = [PlantResult(rule_id, "backward", 0, 2, SCALE, CAUGHT if first_caught else MISSED,
                          smallest_delta=first_caught),
              PlantResult(rule_id, "backward", 1, 2, SCALE, MISSED),
              PlantResult(rule_id, "backward", 1, 2, SIGN, MISSED)]
    return CellPower(plants).to_dict()


def repository(session, name: str = REPO):
    return get_or_create_repository(session, f"https://github.com/{name}.git", name)


# --- the option, and the runs it reaches ------------------------------------------------------------


def test_power_is_measured_on_pushes_to_the_default_branch_of_a_repository_that_turned_it_on(database_url):
    with session_scope(database_url) as session:
        repo, other = repository(session), repository(session, "octo/other")
        assert set_power(session, "OCTO/power", True) and not set_power(session, "octo/Power", True)
        from gradci.services.db.runs import create_run

        def run(repo=repo, **fields: Any) -> Run:
            return create_run(session, repository=repo, head_sha="a" * 40, **fields)

        assert measures_power(session, run(trigger="push", ref="refs/heads/main"))
        assert not measures_power(session, run(trigger="webhook", pr_number=3, ref="refs/pull/3/head"))
        assert not measures_power(session, run(trigger="push"))  # a pull request's base run: its report waits
        assert not measures_power(session, run(trigger="api", ref="refs/heads/main"))
        assert not measures_power(session, run(trigger="upload", ref="main"))
        assert not measures_power(session, run(other, trigger="push", ref="refs/heads/main"))  # option off
        assert power_repositories(session) == {"octo/power"}
        assert set_power(session, REPO, False)
        assert not measures_power(session, run(trigger="push", ref="refs/heads/main"))
        with pytest.raises(ValueError, match="owner/name"):
            set_power(session, "octo/../x", True)


# --- records stored beside their cells --------------------------------------------------------------


def test_a_jobs_cells_leave_their_power_records_beside_them_and_a_rewrite_replaces_them(database_url, make_run):
    run_id = make_run(database_url, head_sha="a" * 40)
    for first_caught in (1e-6, 1e-3):  # a redelivered job writes its cells again
        buffer = CellRecordsBuffer(run_id, "job 1")
        taken = [buffer.take({**cell("mul/gradient"), "power": power_record("Mul", first_caught),
                              "rule_coverage": {"rules": {f"{FILE}::Mul": ["backward"]}, "lines": {FILE: [8]}}})]
        assert "power" not in taken[0] and "rule_coverage" not in taken[0]
        with session_scope(database_url) as session:
            upsert_results(session, run_id, taken)
            buffer.store(session)
        buffer.committed()
    with session_scope(database_url, readonly=True) as session:
        (row,) = session.scalars(select(CellPowerRow).where(CellPowerRow.run_id == run_id))
        assert (row.scenario, row.dtype, row.smallest_delta) == ("mul/gradient", "float64", 1e-3)
        assert row.record["missed"] == ["Mul: `backward`'s second output (scaled by 1.1, a sign flipped)"]


def test_a_power_record_a_runner_could_not_make_is_dropped_and_its_cell_kept(database_url, make_run):
    """The runner ran the repository's code: its answer is held to the schema an upload is."""
    run_id = make_run(database_url, head_sha="a" * 40)
    buffer = CellRecordsBuffer(run_id, "job 1")
    hostile = [{"plants": [{"rule": ["not", "a", "name"], "method": "backward", "kind": "scale"}]},
               {"plants": [], "not_measured": "x" * 5000}, "a string", {**power_record("Mul", 1e-6), "extra": 1}]
    taken = [buffer.take({**cell(f"s{index}/gradient"), "power": record}) for index, record in enumerate(hostile)]
    with session_scope(database_url) as session:
        upsert_results(session, run_id, taken)
        buffer.store(session)
    with session_scope(database_url, readonly=True) as session:
        assert session.scalar(select(func.count()).select_from(Result).where(Result.run_id == run_id)) == 4
        assert session.scalar(select(func.count()).select_from(CellPowerRow)) == 0


# --- uploads --------------------------------------------------------------------------------------


def upload_cell(**records: Any) -> dict[str, Any]:
    return {**cell("mul/gradient"), "fingerprint": None, **records}


def test_an_upload_carries_rule_coverage_power_and_rules_and_its_sums_are_recomputed():
    lying = {**power_record("Mul", 1e-6), "smallest_delta": 1e-8, "missed": ["nothing, honest"]}
    upload = UploadIn.model_validate({
        "repository": REPO, "sha": "a" * 40, "rules": [rule("Mul")],
        "cells": [upload_cell(rule_coverage={"rules": {f"{FILE}::Mul": ["forward", "backward"]},
                                             "lines": {FILE: [4, 8]}}, power=lying)]})
    assert upload.rules[0].id == f"{FILE}::Mul"
    assert upload.cells[0].power.record()["smallest_delta"] == 1e-6  # from its plants, not as sent
    assert upload.cells[0].power.record()["missed"] == ["Mul: `backward`'s second output (scaled by 1.1, "
                                                        "a sign flipped)"]
    assert "power" not in upload.cell_rows()[0] and "rule_coverage" not in upload.cell_rows()[0]


@pytest.mark.parametrize(("records", "says"), [
    ({"rule_coverage": {"rules": {}, "lines": {}, "extra": 1}}, "Extra inputs are not permitted"),
    ({"rule_coverage": {"lines": {"../../etc/passwd": [1]}}}, "not a path inside the checkout"),
    ({"rule_coverage": {"lines": {"/etc/passwd": [1]}}}, "not a path inside the checkout"),
    ({"rule_coverage": {"lines": {FILE: [0]}}}, "greater than or equal to 1"),
    ({"rule_coverage": {"rules": {f"{FILE}::Mul": ["__import__"]}}}, "Input should be 'forward'"),
    ({"rule_coverage": {"rules": {f"{FILE}::M{i}": ["forward"] for i in range(1001)}}}, "at most 1000"),
    ({"power": {**power_record("Mul", 1e-6), "plants": [{**power_record("Mul", 1e-6)["plants"][0],
                                                        "smallest_delta": 3.0}]}}, "less than or equal to 1"),
    ({"power": {"plants": [{**power_record("Mul", 1e-6)["plants"][0], "kind": "rm -rf"}]}}, "Input should be"),
    ({"power": {"plants": [], "not_measured": "a\nline"}}, "String should match pattern"),
])
def test_hostile_records_are_refused_naming_their_field(records: dict[str, Any], says: str):
    with pytest.raises(ValidationError) as caught:
        UploadIn.model_validate({"repository": REPO, "sha": "a" * 40, "cells": [upload_cell(**records)]})
    assert says in str(caught.value)


@pytest.mark.parametrize(("change", "says"), [
    ({"file": "../x.py"}, "not a path inside the checkout"),
    ({"id": "other.py::Mul"}, "a rule's id is its file::name"),
    ({"kind": "my.own.kind"}, "Input should be"),
    ({"methods": []}, "at least 1 item"),
    ({"surprise": True}, "Extra inputs are not permitted"),
])
def test_a_hostile_rule_is_refused(change: dict[str, Any], says: str):
    with pytest.raises(ValidationError) as caught:
        UploadIn.model_validate({"repository": REPO, "sha": "a" * 40, "cells": [upload_cell()],
                                 "rules": [{**rule("Mul"), **change}]})
    assert says in str(caught.value)


def shard(database_url: str, cells: list[dict[str, Any]]) -> int:
    import io
    import json

    raw = io.BytesIO(json.dumps({"cells": cells}).encode())
    with session_scope(database_url) as session:
        stored = store_shard(session, repository(session), Commit(sha="a" * 40), "cpu", ["cpu", "gpu"],
                             cell_rows(raw), 600)
        return stored.run_id


def test_an_uploaded_shard_stores_its_cells_records_and_an_upload_again_replaces_them(database_url):
    coverage = {"rules": {f"{FILE}::Mul": ["forward", "backward"]}, "lines": {FILE: [4, 8]}}
    run_id = shard(database_url, [upload_cell(rule_coverage=coverage, power=power_record("Mul", 1e-6)),
                                  {**upload_cell(), "scenario": "other/gradient"}])
    with session_scope(database_url, readonly=True) as session:
        assert session.scalar(select(func.count()).select_from(Result).where(Result.run_id == run_id)) == 2
        assert sorted(session.scalars(select(RuleReach.method).where(RuleReach.run_id == run_id))) == [
            "backward", "forward"]
        assert covered_lines(session, run_id) == {FILE: [4, 8]}
        assert session.scalar(select(CellPowerRow.smallest_delta).where(CellPowerRow.run_id == run_id)) == 1e-6
    # The shard again, its cell now reaching only forward, without power: nothing of before is left.
    again = shard(database_url, [upload_cell(rule_coverage={"rules": {f"{FILE}::Mul": ["forward"]},
                                                            "lines": {FILE: [4]}})])
    assert again == run_id
    with session_scope(database_url, readonly=True) as session:
        assert list(session.scalars(select(RuleReach.method).where(RuleReach.run_id == run_id))) == ["forward"]
        assert covered_lines(session, run_id) == {FILE: [4]}
        assert session.scalar(select(func.count()).select_from(CellPowerRow)) == 0


# --- the report ------------------------------------------------------------------------------------


def finished_run(session, repo, **fields: Any) -> Run:
    from gradci.services.db.runs import create_run

    run = create_run(session, repository=repo, **fields)
    run.status = RunStatus.passed.value
    return run


def test_a_pull_requests_report_says_which_perturbations_no_cell_catches_from_the_default_branch(database_url):
    with session_scope(database_url) as session:
        repo = repository(session)
        branch = finished_run(session, repo, head_sha="b" * 40, trigger="push", ref="refs/heads/main")
        pr = finished_run(session, repo, head_sha="c" * 40, base_sha="b" * 40, pr_number=5, trigger="webhook")
        other_pr = finished_run(session, repository(session, "octo/elsewhere"), head_sha="d" * 40, pr_number=5,
                                trigger="webhook")
        for run in (branch, pr, other_pr):
            record_rules(session, run.id, [rule("Mul"), rule(TRICKY)])
        buffer = CellRecordsBuffer(branch.id, "job 1")
        cells = [buffer.take({**cell("mul/f64"), "power": power_record("Mul", 1e-6)}),
                 buffer.take({**cell("tricky/f32", "float32", rtol=1e-4), "power": power_record(TRICKY, 0.1)})]
        upsert_results(session, branch.id, cells)
        buffer.store(session)
        for run in (pr, other_pr):
            upsert_results(session, run.id, [cell("mul/f64"), cell("tricky/f32", "float32")])
        ids = branch.id, pr.id, other_pr.id
    with session_scope(database_url, readonly=True) as session:
        branch, pr, other_pr = (session.get(Run, run_id) for run_id in ids)
        assert latest_power_run(session, pr.repository_id) == branch
        report = report_for_run(session, pr)
        assert report_for_run(session, other_pr).power is None  # another repository's branch measured nothing
        assert len(rule_catalog(session, branch.id)) == 2
    power = report.power
    assert power is not None and power.run_id == branch.id and not power.own
    texts: dict[str, list[str]] = {}
    for finding in power.findings:
        texts.setdefault(finding.name, []).append(finding.text)
    assert [t[:79] for t in texts["Mul"]] == [
        "`backward`'s second output, scaled by 1.1, a sign flipped: caught by no cell: t"]
    assert texts[TRICKY][0] == ("a 1 % error in `backward`'s first output is caught by no cell (the smallest caught: "
                                "10 %): only float32 cells reach it (rtol up to 1e-04)")
    body = render(report)
    assert "### Detection power" in body and f"#{branch.id}" in body
    assert "caught by no cell" in body and "only float32 cells reach it" in body
    # The rule's name only inside a code span it cannot close: no mention, link or comment.
    assert "``" + TRICKY + "``" in body
    assert body.count("<!--") == 1 + body.count(TRICKY)
    # Information only: the statuses are those of the same report without it.
    assert report.project == report.model_copy(update={"power": None}).project
    assert report.project.state == "success" and report.patch.state == "success"


def test_a_finding_whose_words_are_not_gradcis_is_shown_whole_as_code():
    from gradci.services.reports.report_record import PowerFinding, PowerSection

    hostile = "`x` is caught by no cell [click](http://evil) @octocat"
    section = PowerSection(run_id=1, head_sha="a" * 40, own=True, rule_count=1, finding_count=2, findings=[
        PowerFinding(rule_id="r", name="R", file=FILE, text=hostile),
        PowerFinding(rule_id="r", name="R", file=FILE,
                     text="a 1 % error in `bwd`'s second output is caught by no cell: only float32 cells reach it "
                          "(rtol up to 1e-04)")])
    text = power_section(section)
    assert f"- `R` (`pkg/ops.py`): `` {hostile} ``\n" in text  # one code span its backticks cannot close
    assert "- `R` (`pkg/ops.py`): a 1 % error in `bwd`'s second output is caught by no cell" in text


# --- an upload over HTTP ---------------------------------------------------------------------------


@pytest.fixture
def upload_client(clean_environment, sqlite_url: str, tmp_path):
    from fastapi.testclient import TestClient

    from gradci.services.settings import Settings
    from gradci.web.app import create_app  # the API and the dashboard
    from tests.support.fake_github import FakeGitHub

    with FakeGitHub() as github:
        settings = Settings(database_url=sqlite_url, broker_url="memory://", workdir=tmp_path / "work",
                            upload_max_bytes=400_000, read_access="open", github_api_url=github.url)
        with TestClient(create_app(settings), base_url="http://127.0.0.1") as client:
            yield client


def test_an_uploaded_run_shows_its_rules_and_power_as_a_workers_does(upload_client, sqlite_url):
    from gradci.services.uploads.tokens import create_token

    with session_scope(sqlite_url) as session:
        _, token = create_token(session, REPO)
    headers = {"Authorization": f"Bearer {token}"}
    tricky = {**rule(TRICKY), "methods": [{**m, "source": "    def backward(ctx, g):\n        return g <script>\n"}
                                          for m in rule(TRICKY)["methods"]]}
    coverage = {"rules": {f"{FILE}::{TRICKY}": ["forward"]}, "lines": {FILE: [4]}}
    evil = "<img src=x onerror=alert(1)>"
    body = {"repository": REPO, "sha": "e" * 40, "rules": [rule("Mul"), tricky, rule(evil)],
            "cells": [upload_cell(rule_coverage=coverage, power=power_record(TRICKY, 0.1)),
                      {**upload_cell(power=power_record(evil, None)), "scenario": "evil/gradient"}]}
    hostile = {**body, "sha": "f" * 40, "rules": [{**rule("Mul"), "file": "../../etc/passwd"}]}
    refused = upload_client.post("/api/uploads", json=hostile, headers=headers)
    assert refused.status_code == 422 and refused.json()["detail"][0]["loc"][:3] == ["body", "rules", 0]
    answer = upload_client.post("/api/uploads", json=body, headers=headers)
    assert answer.status_code == 202, answer.text
    run_id = answer.json()["run_id"]
    with session_scope(sqlite_url, readonly=True) as session:
        assert session.scalar(select(func.count()).select_from(Run)) == 1  # the refused upload stored nothing
        run = session.get(Run, run_id)
        report = report_for_run(session, run)
    assert report.rules is not None and {f.name: f.text for f in report.rules.findings} == {
        "Mul": "not exercised by any scenario", TRICKY: "not exercised by any scenario",
        evil: "not exercised by any scenario"}
    assert report.power is not None and report.power.own and report.power.finding_count == 4  # 1 + 3 outputs
    page = upload_client.get(f"/runs/{run_id}/rules")
    assert page.status_code == 200 and 'id="power-cells"' in page.text
    assert TRICKY not in page.text and "Mul`@octocat [x](http://evil) &lt;!--" in page.text  # escaped
    assert evil not in page.text and "&lt;img src=x onerror=alert(1)&gt;: <code>backward</code>" in page.text
    cell_id = page.text.split(f'href="/runs/{run_id}/cells/')[1].split('"')[0]  # the weakest detector: evil's
    cell_page = upload_client.get(f"/runs/{run_id}/cells/{cell_id}")
    assert "<code>backward</code>&#39;s second output" in cell_page.text and evil not in cell_page.text
    file_page = upload_client.get(f"/runs/{run_id}/rules/file", params={"path": FILE})
    assert "return g &lt;script&gt;" in file_page.text and "<script>" not in file_page.text.split("</head>")[1]


def test_every_field_the_engine_writes_in_a_power_record_is_one_the_schema_takes():
    """The runner's records are held to the upload's schema: a field the engine adds and the schema
    lacks would drop every record (as ``stopped_delta`` and ``raised`` once did)."""
    from gradci.services.db.record_schema import UploadedPower

    plant = PlantResult(rule="ops.py::Mul", method="backward", output=0, outputs=2, kind=SCALE, outcome=CAUGHT,
                        smallest_delta=1e-3, missed_delta=1e-4, note="raised: ValueError", stopped_delta=1e-5)
    record = CellPower([plant]).to_dict()
    validated = UploadedPower.model_validate(record)  # closed: a field it does not know is refused
    assert set(validated.model_dump()) == set(record)
    assert set(validated.plants[0].model_dump()) == set(plant.to_dict())


def test_every_field_the_engine_writes_in_a_rule_is_one_the_upload_schema_takes():
    """Likewise for a rule's record (``Rule.to_dict``): ``inherited`` once made every upload with rules a 422."""
    from gradci.scenarios.rules.discovery import Rule, RuleMethod
    from gradci.services.db.record_schema import UploadedRule

    method = RuleMethod(name="backward", file="ops.py", first_line=3, lines=(3, 4), digest="ab", inherited=True)
    rule = Rule(kind="torch.autograd.Function", name="Mul", file="ops.py", methods=(method,))
    record = rule.to_dict()
    validated = UploadedRule.model_validate(record)  # closed: a field it does not know is refused
    assert set(record["methods"][0]) <= set(validated.methods[0].model_dump())  # (the upload adds source)
    assert validated.methods[0].inherited


def test_the_solver_rules_kinds_and_methods_are_words_the_upload_schema_takes():
    """A custom_linear_solve's or custom_root's rule, its coverage and a plant in it upload like any other."""
    from gradci.scenarios.rules.discovery import CUSTOM_LINEAR_SOLVE, CUSTOM_ROOT, Rule, RuleMethod
    from gradci.services.db.record_schema import UploadedPower, UploadedRule, UploadedRuleCoverage

    for kind, names in ((CUSTOM_LINEAR_SOLVE, ("solve", "transpose_solve")), (CUSTOM_ROOT, ("solve", "tangent_solve"))):
        methods = tuple(RuleMethod(name, "ops.py", 3 + 3 * index, (4 + 3 * index,)) for index, name in enumerate(names))
        rule = Rule(kind=kind, name="linear.<locals>.solve", file="ops.py", methods=methods)
        assert UploadedRule.model_validate(rule.to_dict()).kind == kind
        coverage = UploadedRuleCoverage.model_validate({"rules": {rule.id: list(names)}, "lines": {"ops.py": [4]}})
        assert coverage.rules[rule.id] == list(names)
        plant = PlantResult(rule=rule.id, method=names[1], output=0, outputs=1, kind=SCALE, outcome=CAUGHT,
                            smallest_delta=1e-5)
        assert UploadedPower.model_validate(CellPower([plant]).to_dict()).plants[0].method == names[1]
