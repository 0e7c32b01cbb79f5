"""Rule coverage in the engine: which of a project's derivative rules each cell ran.

The project (tests/data/projects/rule_coverage) has a torch ``autograd.Function`` with a backward and
a jvp, two more with a backward only (one of them wrong), and a ``jax.custom_vjp`` behind a
module-level ``jax.jit``. Each claim is shown with its twin: the finding appears where the planted
condition holds and not where it does not.
"""
from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("jax")

from gradci.scenarios.check import check_scenario, resolve_backends
from gradci.scenarios.reference.answer import ReferenceCache
from gradci.scenarios.rules.discovery import CUSTOM_VJP, TORCH_FUNCTION, Rule
from gradci.scenarios.rules.records import CellRules
from gradci.scenarios.rules.reports import write_report
from gradci.scenarios.rules.summary import NOT_EXERCISED, summarize
from gradci.scenarios.rules.tracing import RuleTracer, tracing
from tests.engine.rules.projects import imported_copy

PROJECT = Path(__file__).resolve().parents[2] / "data" / "projects" / "rule_coverage"
OPS = "rulecov/ops.py"


@pytest.fixture
def project(tmp_path):
    yield from imported_copy(PROJECT, "rulecov", tmp_path)


def checked(root: Path, scenarios, backends: list[str], tracer: RuleTracer | None = None):
    """Each scenario's cells, and the tracer that recorded them."""
    tracer = tracer or RuleTracer(root)
    return checked_by(scenarios, backends, tracer), tracer


def checked_by(scenarios, backends: list[str], tracer: RuleTracer | None) -> list:
    """Each scenario's cells, their lines recorded by ``tracer`` (None: checked without rule coverage)."""
    references = ReferenceCache()
    with tracing(tracer):
        return [cell for scenario in scenarios for cell in
                check_scenario(scenario, resolve_backends(backends), ["cpu"], ["float64"], references)]


def summary_of(cells, tracer: RuleTracer):
    rules = tracer.rules()
    return summarize(rules, [(cell, tracer.take(cell.key, rules)) for cell in cells])


def findings_by_rule(summary) -> dict[str, str]:
    return {finding.rule.name: finding.text for finding in summary.findings()}


def test_discovery_finds_the_projects_rules_with_their_own_methods(project):
    root, _ = project
    rules = {rule.name: rule for rule in RuleTracer(root).rules()}
    assert set(rules) == {"Cube", "Square", "WrongSquare", "jcube"}
    assert rules["Cube"].kind == TORCH_FUNCTION and rules["Cube"].file == OPS
    # torch's own defaults (vjp, vmap) are not the user's rule
    assert [m.name for m in rules["Cube"].methods] == ["forward", "setup_context", "backward", "jvp"]
    assert [m.name for m in rules["Square"].methods] == ["forward", "backward"]
    assert rules["jcube"].kind == CUSTOM_VJP and [m.name for m in rules["jcube"].methods] == ["fun", "fwd", "bwd"]
    source = (root / OPS).read_text().splitlines()
    backward = rules["Cube"].method("backward")
    assert backward is not None and "saved_tensors" in source[backward.lines[0] - 1]
    assert Rule.from_dict(json.loads(json.dumps(rules["Cube"].to_dict()))) == rules["Cube"]


def test_each_cell_records_the_rule_methods_it_ran(project):
    root, scenarios = project
    cells, tracer = checked(root, [scenarios["cube/gradient"]], ["torch-rev", "torch-fwd", "jax-rev", "jax-rev-jit"])
    rules = tracer.rules()
    records = {cell.backend: tracer.take(cell.key, rules) for cell in cells}
    assert records["torch-rev"].rules == {f"{OPS}::Cube": ["forward", "setup_context", "backward"]}
    assert records["torch-fwd"].rules == {f"{OPS}::Cube": ["forward", "setup_context", "jvp"]}
    assert records["jax-rev"].rules == {f"{OPS}::jcube": ["fun", "fwd", "bwd"]}
    # a compiled cell's second point needs a reference there, made inside the cell by evaluating f (the
    # torch one runs Cube): not the cell's own lines
    assert records["jax-rev-jit"].rules == {f"{OPS}::jcube": ["fun", "fwd", "bwd"]}
    # the record is plain JSON and reads back as it was
    assert CellRules.from_dict(json.loads(json.dumps(records["jax-rev"].to_dict()))) == records["jax-rev"]
    assert all(file == OPS or file.startswith("rulecov/") for file in records["jax-rev"].lines)


def test_a_rule_whose_only_scenario_is_deleted_is_not_exercised(project):
    root, scenarios = project
    kept = [scenarios["cube/gradient"], scenarios["square/gradient"]]
    cells, tracer = checked(root, kept, ["torch-rev"])
    assert "Square" not in findings_by_rule(summary_of(cells, tracer))
    # planted: the only scenario that reaches Square is deleted
    cells, tracer = checked(root, kept[:1], ["torch-rev"])
    assert findings_by_rule(summary_of(cells, tracer))["Square"] == NOT_EXERCISED


def test_a_jvp_reached_only_by_reverse_cells_is_reported(project):
    root, scenarios = project
    cells, tracer = checked(root, [scenarios["cube/gradient"]], ["torch-rev"])
    finding = next(f for f in summary_of(cells, tracer).findings() if f.rule.name == "Cube")
    assert finding.text == "backward exercised, jvp never"
    assert "reverse-mode cells" in finding.hint and "torch-fwd" in finding.hint
    cells, tracer = checked(root, [scenarios["cube/gradient"]], ["torch-rev", "torch-fwd"])
    assert "Cube" not in findings_by_rule(summary_of(cells, tracer))


def test_a_jitted_rule_is_recorded_for_every_cell_that_runs_its_trace(project):
    """The second check runs programs cached by the first (the engine's kept program, the module's jax.jit)."""
    root, scenarios = project
    tracer = RuleTracer(root)
    rules = tracer.rules()
    for _ in range(2):
        cells, _ = checked(root, [scenarios["cube/gradient"]], ["jax-rev", "jax-rev-jit"], tracer=tracer)
        for cell in cells:
            assert tracer.take(cell.key, rules).rules.get(f"{OPS}::jcube") == ["fun", "fwd", "bwd"], cell.backend


def test_verdicts_are_the_same_with_and_without_rule_coverage(project):
    root, scenarios = project
    everything = list(scenarios.values())
    backends = ["torch-rev", "torch-fwd", "jax-rev", "jax-rev-jit"]
    with_coverage = checked_by(everything, backends, RuleTracer(root))
    without = checked_by(everything, backends, None)
    verdicts = [(c.key, c.status, c.message) for c in with_coverage]
    assert verdicts == [(c.key, c.status, c.message) for c in without]
    assert {c.status for c in with_coverage if c.scenario == "wrong/gradient" and c.backend == "torch-rev"} == {"fail"}


def test_the_report_files_carry_the_lines_the_cells_ran(project, tmp_path):
    root, scenarios = project
    cells, tracer = checked(root, [scenarios["square/gradient"]], ["torch-rev"])
    summary = summary_of(cells, tracer)
    square = next(rule for rule in summary.rules if rule.name == "Square")
    cube = next(rule for rule in summary.rules if rule.name == "Cube")
    ran, missed = square.method("backward"), cube.method("backward")
    assert ran is not None and missed is not None
    write_report(tmp_path / "rules.info", root, summary.lines, [OPS])
    lcov = (tmp_path / "rules.info").read_text()
    assert f"SF:{OPS}" in lcov and f"DA:{ran.lines[0]},1" in lcov and f"DA:{missed.lines[0]},0" in lcov
    write_report(tmp_path / "rules.xml", root, summary.lines, [OPS])
    hits = {(c.get("filename"), int(line.attrib["number"])): int(line.attrib["hits"])
            for c in ET.parse(tmp_path / "rules.xml").iter("class") for line in c.iter("line")}
    assert hits[(OPS, ran.lines[0])] == 1 and hits[(OPS, missed.lines[0])] == 0
