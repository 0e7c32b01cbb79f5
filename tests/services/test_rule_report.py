"""The report's rules section from stored rule coverage: which rules a pull request adds or changes,
the cells that ran them, its findings as failing (or warning) lines, the project status they fail, the
check-run annotations on the rule's lines; every user string escaped."""
from __future__ import annotations

from typing import Any

import pytest

from gradci.services.db.models import Run, RunStatus
from gradci.services.db.results import upsert_results
from gradci.services.db.rules import covered_lines, record_lines, record_reaches, record_rules
from gradci.services.db.session import session_scope
from gradci.services.reports.annotations import rule_annotations
from gradci.services.reports.markdown import render
from gradci.services.reports.run_report import report_for_run

FILE = "pkg/ops.py"
TRICKY = "Sneaky`@octocat [x](http://evil) <!--"


def method(name: str, first: int, last: int, digest: str) -> dict[str, Any]:
    return {"name": name, "file": FILE, "first_line": first, "lines": list(range(first + 1, last + 1)),
            "digest": digest}


def rule(name: str, *methods: dict[str, Any], kind: str = "torch.autograd.Function") -> dict[str, Any]:
    return {"id": f"{FILE}::{name}", "kind": kind, "name": name, "file": FILE, "methods": list(methods)}


BASE_RULES = [
    rule("Square", method("forward", 10, 13, "a1"), method("backward", 15, 18, "a2")),
    rule("Cube", method("forward", 20, 22, "b1"), method("backward", 24, 26, "b2"), method("jvp", 28, 30, "b3")),
]
HEAD_RULES = [
    rule("Square", method("forward", 10, 13, "a1"), method("backward", 15, 18, "CHANGED")),  # changed
    BASE_RULES[1],  # unchanged, its jvp never reached: not this pull request's finding
    rule("Unused", method("forward", 40, 43, "c1"), method("backward", 45, 48, "c2")),  # added, reached by nothing
    rule(TRICKY, method("forward", 50, 52, "d1"), method("backward", 54, 56, "d2")),  # added, backward never
]


def cell(scenario: str, backend: str = "torch-rev", **fields: Any) -> dict[str, Any]:
    return {"scenario": scenario, "operator": "gradient", "framework": "torch", "backend": backend,
            "mode": "reverse", "device": "cpu", "dtype": "float64", "status": "pass", **fields}


def reaches(run_id: int, scenario: str, rules: dict[str, list[str]]) -> list[dict[str, Any]]:
    return [{"run_id": run_id, "rule_id": f"{FILE}::{name}", "method": m, "scenario": scenario,
             "backend": "torch-rev", "operator": "gradient", "mode": "reverse", "device": "cpu", "dtype": "float64"}
            for name, methods in rules.items() for m in methods]


def pull_request_run(url: str, make_run, config: dict[str, Any]) -> int:
    base_id = make_run(url, head_sha="b" * 40)
    head_id = make_run(url, head_sha="h" * 40, base_sha="b" * 40, pr_number=7)
    with session_scope(url) as session:
        for run_id, rules in ((base_id, BASE_RULES), (head_id, HEAD_RULES)):
            run = session.get(Run, run_id)
            assert run is not None
            run.status = RunStatus.passed.value
            run.config = config
            record_rules(session, run_id, rules)
            upsert_results(session, run_id, [cell("square/gradient"), cell("cube/gradient")])
        rows = (reaches(head_id, "square/gradient", {"Square": ["forward", "backward"]})
                + reaches(head_id, "cube/gradient", {"Cube": ["forward", "backward"], TRICKY: ["forward"]}))
        record_reaches(session, rows + rows)  # twice: stored once
        record_lines(session, head_id, "job 1", {FILE: [11, 12, 16]})
        record_lines(session, head_id, "job 2", {FILE: [21, 25]})
        record_lines(session, head_id, "job 2", {FILE: [21, 25, 51]})  # a part rewrites its own row
    return head_id


@pytest.mark.parametrize("severity", ["failure", "warning"])
def test_a_rule_no_scenario_reaches_is_a_failing_line_unless_configured_as_a_warning(database_url, make_run,
                                                                                    severity):
    config = {} if severity == "failure" else {"rules": {"unexercised": "warning"}}
    run_id = pull_request_run(database_url, make_run, config)
    with session_scope(database_url, readonly=True) as session:
        run = session.get(Run, run_id)
        assert run is not None
        report = report_for_run(session, run)
        assert covered_lines(session, run_id) == {FILE: [11, 12, 16, 21, 25, 51]}
    rules = report.rules
    assert rules is not None and rules.compared and rules.severity == severity
    assert {r.name: r.change for r in rules.rules} == {"Square": "changed", "Unused": "added", TRICKY: "added"}
    square = next(r for r in rules.rules if r.name == "Square")
    assert [(m.method, m.cells) for m in square.methods] == [("forward", 1), ("backward", 1)]
    assert [(t.backend, t.operator, t.cells) for t in square.methods[1].by] == [("torch-rev", "gradient", 1)]
    found = {f.name: f for f in rules.findings}
    assert found["Unused"].text == "not exercised by any scenario"
    assert (found["Unused"].start_line, found["Unused"].end_line) == (45, 48)  # its backward's lines
    assert found[TRICKY].text == "not exercised by any scenario"  # only its forward ran
    assert rules.other_findings == 1  # Cube's jvp: a rule the pull request did not change
    failing = severity == "failure"
    assert (rules.state == "failure") is failing
    assert (report.project.state == "failure") is failing  # the commit status and the check run's conclusion
    assert report.project.description.startswith("2 rules not fully exercised") is failing

    body = render(report)
    assert "### Rules" in body and "not exercised by any scenario" in body
    assert ("❌" in body) is failing and ("⚠️" in body) is not failing
    assert "`Unused`" in body and "`pkg/ops.py:45-48`" in body
    # The user's rule name only inside a code span that it cannot close: no mention, link or comment.
    assert "``" + TRICKY + "``" in body
    assert body.count("<!--") == 1 + body.count(TRICKY)  # gradci's own marker, and the escaped name

    annotations = {a.title: a.to_github() for a in rule_annotations(rules)}
    unused = annotations["Unused: not exercised by any scenario"]
    assert unused["path"] == FILE and (unused["start_line"], unused["end_line"]) == (45, 48)
    assert unused["annotation_level"] == severity


def test_without_a_base_catalog_every_rule_counts_as_added(database_url, make_run):
    run_id = make_run(database_url, head_sha="h" * 40)
    with session_scope(database_url) as session:
        run = session.get(Run, run_id)
        assert run is not None
        run.status = RunStatus.passed.value
        record_rules(session, run_id, HEAD_RULES)
        record_rules(session, run_id, HEAD_RULES)  # a second listing adds nothing
        upsert_results(session, run_id, [cell("cube/gradient")])
        record_reaches(session, reaches(run_id, "cube/gradient", {"Cube": ["backward"]}))
    with session_scope(database_url, readonly=True) as session:
        run = session.get(Run, run_id)
        assert run is not None
        rules = report_for_run(session, run).rules
    assert rules is not None and not rules.compared and rules.changed_count == 4
    assert {f.name: f.text for f in rules.findings}["Cube"] == "backward exercised, jvp never"
