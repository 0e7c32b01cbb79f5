"""Detection power in the engine: errors planted in a project's rules, and which cells catch them.

The project (tests/data/projects/power) has a torch ``autograd.Function`` and a ``jax.custom_vjp``
computing x * w, whose backward returns the gradients of x and of w. The "mul" scenario holds w
constant (the second gradient is thrown away), its twin "both" makes w depend on x (it is compared);
a third rule is wrong, and its cells fail with or without a plant.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import cast

import pytest

pytest.importorskip("torch")
pytest.importorskip("jax")

from gradci.scenarios.check import check_scenario, resolve_backends
from gradci.scenarios.contract.cell import Status
from gradci.scenarios.power.measure import measure_power
from gradci.scenarios.power.planting import PROBE, Plant, planted
from gradci.scenarios.reference.answer import ReferenceCache
from gradci.scenarios.rules.discovery import rule_objects
from gradci.scenarios.rules.power import CAUGHT, MISSED, SCALE, CellPower, PlantResult, summarize_power
from gradci.scenarios.rules.records import CellRules
from gradci.scenarios.rules.tracing import RuleTracer, tracing
from tests.engine.rules.projects import imported_copy

PROJECT = Path(__file__).resolve().parents[2] / "data" / "projects" / "power"
BACKENDS = ["torch-rev", "jax-rev", "jax-rev-jit"]
MUL, JMUL = "powerops/ops.py::Mul", "powerops/ops.py::jmul"


@pytest.fixture
def project(tmp_path):
    yield from imported_copy(PROJECT, "powerops", tmp_path)


def measured(root: Path, scenario, dtypes=("float64",)):
    """The scenario's cells, checked with rule coverage, and each one's power."""
    tracer, references, backends = RuleTracer(root), ReferenceCache(), resolve_backends(BACKENDS)
    with tracing(tracer):
        cells = check_scenario(scenario, backends, ["cpu"], list(dtypes), references)
    rules = tracer.rules()
    records = {cell.key: CellRules.of(tracer.lines(cell.key), rules) for cell in cells}
    return cells, measure_power(scenario, cells, records, rules, root, backends, references), rules


def plant_results(power: CellPower, rule: str, output: int) -> dict[str, PlantResult]:
    return {p.kind: p for p in power.plants if p.rule == rule and p.output == output}


def test_a_1e_3_error_in_float64_is_caught_and_reported_at_or_below_1e_3(project):
    root, scenarios = project
    scenario = scenarios["mul/gradient"]
    references, backends = ReferenceCache(), resolve_backends(["torch-rev"])
    [before] = check_scenario(scenario, backends, ["cpu"], ["float64"], references)
    objects = rule_objects(root)[MUL]

    def with_plant(plant: Plant) -> Status:
        with planted(objects, "torch.autograd.Function", "backward", plant, root) as state, tracing(cast("RuleTracer", state)):
            [cell] = check_scenario(scenario, backends, ["cpu"], ["float64"], references)
        assert state.applied[cell.key]  # the plant ran in the cell
        return cell.status

    assert before.status == Status.PASS
    assert with_plant(Plant(SCALE, 0, 1e-3)) == Status.FAIL
    assert with_plant(Plant(PROBE)) == Status.PASS  # the wrapper alone changes nothing
    assert with_plant(Plant(SCALE, 0, 1e-12)) == Status.PASS  # below float64's tolerance: not every plant fails

    cells, powers, _ = measured(root, scenario)
    assert [cell.status for cell in cells] == [Status.PASS] * 3
    for cell in cells:
        rule = MUL if cell.framework == "torch" else JMUL
        scale = plant_results(powers[cell.key], rule, 0)[SCALE]
        assert scale.outcome == CAUGHT and scale.smallest_delta is not None and scale.smallest_delta <= 1e-3, cell.key
        assert powers[cell.key].smallest_delta <= 1e-3
    # float32's tolerance is wider: its cells stop earlier on the ladder
    cells32, powers32, _ = measured(root, scenario, ("float32",))
    assert all(powers32[c.key].smallest_delta > max(powers[c2.key].smallest_delta for c2 in cells) for c in cells32)


def test_an_output_no_cell_compares_is_reported_missed_and_its_twin_caught(project):
    root, scenarios = project
    cells, powers, rules = measured(root, scenarios["mul/gradient"])
    for cell in cells:
        rule = MUL if cell.framework == "torch" else JMUL
        second = plant_results(powers[cell.key], rule, 1)
        assert {kind: p.outcome for kind, p in second.items()} == {"scale": MISSED, "sign": MISSED, "drop": MISSED}
        assert {p.outcome for p in plant_results(powers[cell.key], rule, 0).values()} == {CAUGHT}
        assert any("second output" in line for line in powers[cell.key].missed())
    summary = {rp.rule.id: rp for rp in summarize_power(rules, [(c, powers[c.key]) for c in cells])}
    for rule, method in ((MUL, "backward"), (JMUL, "bwd")):
        findings = summary[rule].findings()
        assert len(findings) == 1 and f"`{method}`'s second output" in findings[0], findings
        assert "caught by no cell" in findings[0] and "first output" not in findings[0]
        assert (summary[rule].weakest_caught() or "").endswith(f"`{method}`'s first output")
        assert json.loads(json.dumps(summary[rule].to_dict()))["findings"] == findings
    # the twin: w depends on x, so the second gradient is compared and its errors are caught
    cells, powers, rules = measured(root, scenarios["both/gradient"])
    for cell in cells:
        rule = MUL if cell.framework == "torch" else JMUL
        assert {p.outcome for p in plant_results(powers[cell.key], rule, 1).values()} == {CAUGHT}, cell.key
    assert not any(rp.findings() for rp in summarize_power(rules, [(c, powers[c.key]) for c in cells]))


def test_power_leaves_verdicts_alone_and_a_failing_cell_stays_failing(project):
    root, scenarios = project
    for name in ("wrong/gradient", "mul/gradient"):
        plain = check_scenario(scenarios[name], resolve_backends(BACKENDS), ["cpu"], ["float64"], ReferenceCache())
        cells, powers, _ = measured(root, scenarios[name])
        verdicts = [(c.key, c.status, c.max_abs_err, c.message) for c in cells]
        assert verdicts == [(c.key, c.status, c.max_abs_err, c.message) for c in plain]
    cells, powers, _ = measured(root, scenarios["wrong/gradient"])
    [cell] = [c for c in cells if c.key in powers]
    assert cell.status == Status.FAIL
    assert powers[cell.key].plants == [] and "fail without a plant" in (powers[cell.key].not_measured or "")
    assert CellPower.from_dict(json.loads(json.dumps(powers[cell.key].to_dict()))) == powers[cell.key]


def test_every_plant_is_restored_and_a_later_check_in_the_process_passes(project):
    root, scenarios = project
    ops = sys.modules["powerops.ops"]  # imported by the fixture, from the copy

    backward, bwd = vars(ops.Mul)["backward"], ops.jmul.bwd
    cells, powers, _ = measured(root, scenarios["both/gradient"])
    assert any(p.outcome == CAUGHT for c in cells for p in powers[c.key].plants)  # plants did run here
    assert vars(ops.Mul)["backward"] is backward and ops.jmul.bwd is bwd
    again = check_scenario(scenarios["both/gradient"], resolve_backends(BACKENDS), ["cpu"], ["float64"],
                           ReferenceCache())
    assert [c.status for c in again] == [Status.PASS] * 3


def test_power_walks_the_projects_modules_once_after_the_cells(project, monkeypatch):
    """The rules and their live objects come from one walk; a cell run since makes the next one walk again."""
    import gradci.scenarios.rules.discovery as discovery

    root, scenarios = project
    walks = []
    walk = discovery._rules_and_objects
    monkeypatch.setattr(discovery, "_rules_and_objects", lambda at: walks.append(at) or walk(at))
    cells, powers, _ = measured(root, scenarios["mul/gradient"])  # tracer.rules(), then measure_power
    assert any(p.outcome == CAUGHT for c in cells for p in powers[c.key].plants)  # it did plant
    assert len(walks) == 1, walks
    check_scenario(scenarios["mul/gradient"], resolve_backends(["torch-rev"]), ["cpu"], ["float64"], ReferenceCache())
    assert MUL in rule_objects(root) and len(walks) == 2  # the cell may have made rules anew: walked again
