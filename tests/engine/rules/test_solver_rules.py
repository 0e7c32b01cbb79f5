"""The derivative rules a project hands to jax.lax.custom_linear_solve and jax.lax.custom_root.

The project (tests/data/projects/solvers) calls ``custom_linear_solve`` with a ``solve`` and a
``transpose_solve`` (a non-symmetric matrix, so that a wrong transpose shows), also under a module-level
``jax.jit`` (which keeps its trace), calls it a second time in a function no scenario calls, and hands ``custom_root`` a ``tangent_solve``. jax traces every one of
those functions when the call is made: their lines run in every cell, so which one served a derivative
is told by what jax's rules did (forward mode solves tangents with ``solve``, reverse mode cotangents with
``transpose_solve``). Each claim is shown with its twin.
"""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import cast

import numpy as np
import pytest

pytest.importorskip("jax")

from gradci.scenarios.check import check_scenario, resolve_backends
from gradci.scenarios.contract.cell import Status
from gradci.scenarios.power.measure import measure_power
from gradci.scenarios.power.planting import PROBE, Plant, planted
from gradci.scenarios.reference.answer import ReferenceCache
from gradci.scenarios.rules.discovery import CUSTOM_LINEAR_SOLVE, CUSTOM_ROOT, discover_rules, rule_objects
from gradci.scenarios.rules.power import CAUGHT, SCALE, SIGN
from gradci.scenarios.rules.summary import NOT_EXERCISED, summarize
from gradci.scenarios.rules.tracing import RuleTracer, tracing
from tests.engine.rules.projects import imported_copy

PROJECT = Path(__file__).resolve().parents[2] / "data" / "projects" / "solvers"
OPS = "solverops/ops.py"
LINEAR = f"{OPS}::solve_linear.<locals>.solve"
UNUSED = f"{OPS}::_solve_by_hand"
ROOT = f"{OPS}::cube_root.<locals>.solve"
REVERSE, FORWARD = ["jax-rev", "jax-rev-jit"], ["jax-fwd"]
# The linear solve as it is, and under the module's jax.jit.
LINEAR_SCENARIOS = pytest.mark.parametrize("name", ["linear/jacobian", "linear-jit/jacobian"])


@pytest.fixture
def project(tmp_path):
    yield from imported_copy(PROJECT, "solverops", tmp_path)


def checked(root: Path, scenarios, backends: list[str], dtypes=("float64",), tracer: RuleTracer | None = None):
    """The scenarios' cells, checked with rule coverage (``tracer``: None, without), and the references."""
    references = ReferenceCache()
    with tracing(tracer):
        cells = [cell for scenario in scenarios for cell in
                 check_scenario(scenario, resolve_backends(backends), ["cpu"], list(dtypes), references)]
    return cells, references


def records_and_summary(root: Path, scenarios, backends: list[str]):
    tracer = RuleTracer(root)
    cells, _ = checked(root, scenarios, backends, tracer=tracer)
    rules = tracer.rules()
    records = {cell.key: tracer.take(cell.key, rules) for cell in cells}
    return cells, records, summarize(rules, [(cell, records[cell.key]) for cell in cells])


def test_discovery_finds_the_rules_handed_to_the_solvers(project):
    root, _ = project
    rules = {rule.id: rule for rule in RuleTracer(root).rules()}
    assert set(rules) == {LINEAR, UNUSED, ROOT}
    assert rules[LINEAR].kind == CUSTOM_LINEAR_SOLVE and rules[ROOT].kind == CUSTOM_ROOT
    assert [m.name for m in rules[LINEAR].methods] == ["solve", "transpose_solve"]
    assert [m.name for m in rules[UNUSED].methods] == ["solve", "transpose_solve"]  # a partial, a lambda
    assert [m.name for m in rules[ROOT].methods] == ["solve", "tangent_solve"]
    assert rules[LINEAR].derivative_methods() == ["solve", "transpose_solve"]
    assert rules[ROOT].derivative_methods() == ["tangent_solve"]  # its solve gives the value only
    source = (root / OPS).read_text().splitlines()
    for rule_id, method, text in ((LINEAR, "transpose_solve", "def transpose_solve"),
                                  (UNUSED, "transpose_solve", "transpose_solve=lambda"),
                                  (ROOT, "tangent_solve", "def tangent_solve")):
        found = rules[rule_id].method(method)
        assert found is not None and text in source[found.first_line - 1], (rule_id, method)


def test_the_forms_a_call_hands_its_functions_in(tmp_path):
    """Bare names of a parameter, keywords, symmetric=True, a module's function; not a method, not jaxopt's."""
    root = tmp_path / "forms"
    root.mkdir()
    (root / "forms_helpers.py").write_text("def cg(matvec, b):\n    return b\n")
    (root / "forms_calls.py").write_text(
        "import forms_helpers\n"
        "def handed(custom_linear_solve, b):\n"
        "    def solve(matvec, rhs):\n        return rhs\n"
        "    return custom_linear_solve(lambda v: v, b, solve, symmetric=True)\n"
        "def by_module(b):\n"
        "    import jax\n"
        "    return jax.lax.custom_linear_solve(lambda v: v, b, forms_helpers.cg, transpose_solve=forms_helpers.cg)\n"
        "class Solver:\n"
        "    def solve(self, matvec, rhs):\n        return rhs\n"
        "    def __call__(self, b):\n"
        "        import jax\n"
        "        return jax.lax.custom_linear_solve(lambda v: v, b, self.solve)\n"
        "def decorator(custom_root, f):\n"
        "    return custom_root(f, solve=None)\n")
    sys.path.insert(0, str(root))
    try:
        for name in ("forms_helpers", "forms_calls"):
            spec = importlib.util.spec_from_file_location(name, root / f"{name}.py")
            assert spec is not None and spec.loader is not None
            module = sys.modules[name] = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
        rules = {rule.name: rule for rule in discover_rules(root)}
    finally:
        sys.path.remove(str(root))
        for name in ("forms_helpers", "forms_calls"):
            sys.modules.pop(name, None)
    assert set(rules) == {"handed.<locals>.solve", "cg"}
    symmetric = rules["handed.<locals>.solve"]
    # symmetric=True: jax hands solve over as the transpose solve too
    assert [(m.name, m.first_line) for m in symmetric.methods] == [("solve", 3), ("transpose_solve", 3)]
    assert rules["cg"].file == "forms_helpers.py" and [m.name for m in rules["cg"].methods] == ["solve", "transpose_solve"]


@LINEAR_SCENARIOS
def test_transpose_solve_is_reached_only_by_reverse_cells_and_solve_by_forward_ones(project, name):
    root, scenarios = project
    cells, records, summary = records_and_summary(root, [scenarios[name]], REVERSE + FORWARD)
    assert {cell.backend: records[cell.key].rules[LINEAR] for cell in cells} == {
        "jax-rev": ["transpose_solve"], "jax-rev-jit": ["transpose_solve"], "jax-fwd": ["solve"]}
    rule = next(rule for rule in summary.rules if rule.id == LINEAR)
    assert sorted(reach.backend for reach in summary.reached_by(rule, "transpose_solve")) == REVERSE
    assert [reach.backend for reach in summary.reached_by(rule, "solve")] == FORWARD
    # jax traced transpose_solve in the forward cell too, when the call was made: its lines ran there
    forward = next(cell for cell in cells if cell.backend == "jax-fwd")
    transpose_solve = rule.method("transpose_solve")
    assert transpose_solve is not None
    assert set(transpose_solve.lines) <= set(records[forward.key].lines[OPS])
    assert LINEAR not in {finding.rule.id for finding in summary.findings()}


@LINEAR_SCENARIOS
def test_a_cell_that_reuses_a_kept_program_is_given_what_its_trace_used(project, name):
    """The second check runs the programs the first compiled: no rule of jax's runs again, the record stays."""
    root, scenarios = project
    tracer = RuleTracer(root)
    rules = tracer.rules()
    for _ in range(2):
        cells, _ = checked(root, [scenarios[name]], REVERSE + FORWARD, tracer=tracer)
        assert {cell.backend: tracer.take(cell.key, rules).rules[LINEAR] for cell in cells} == {
            "jax-rev": ["transpose_solve"], "jax-rev-jit": ["transpose_solve"], "jax-fwd": ["solve"]}


def test_where_jax_is_not_watched_a_solvers_methods_count_by_their_lines(project):
    root, _ = project
    rule = next(rule for rule in RuleTracer(root).rules() if rule.id == LINEAR)
    lines = {OPS: sorted({line for method in rule.methods for line in method.lines})}
    assert rule.reached(lines, None) == ["solve", "transpose_solve"]
    assert rule.reached(lines, set()) == []  # watched: lines alone say nothing of a derivative
    solve = rule.method("solve")
    assert solve is not None and rule.reached(lines, {(OPS, solve.first_line, "solve")}) == ["solve"]


def test_a_matrix_of_forward_cells_only_is_told_transpose_solve_never_ran(project):
    root, scenarios = project
    _, _, summary = records_and_summary(root, [scenarios["linear/jacobian"]], FORWARD)
    finding = next(f for f in summary.findings() if f.rule.id == LINEAR)
    assert finding.text == "solve exercised, transpose_solve never"
    assert "forward-mode cells" in finding.hint and "jax-rev" in finding.hint
    assert "jax.lax.custom_linear_solve" in finding.line()
    _, _, summary = records_and_summary(root, [scenarios["linear/jacobian"]], REVERSE)
    finding = next(f for f in summary.findings() if f.rule.id == LINEAR)
    assert finding.text == "transpose_solve exercised, solve never" and "jax-fwd" in finding.hint


def test_a_solver_rule_no_scenario_reaches_is_not_exercised(project):
    root, scenarios = project
    _, _, summary = records_and_summary(root, list(scenarios.values()), REVERSE + FORWARD)
    findings = {finding.rule.id: finding for finding in summary.findings()}
    assert set(findings) == {UNUSED}
    assert findings[UNUSED].text == NOT_EXERCISED
    assert "makes the jax.lax.custom_linear_solve call that hands over _solve_by_hand" in findings[UNUSED].hint
    # the twin: without its scenario, the rule the linear scenario reached is not exercised either
    _, _, summary = records_and_summary(root, [scenarios["root/jacobian"]], REVERSE + FORWARD)
    assert {f.rule.id: f.text for f in summary.findings()}[LINEAR] == NOT_EXERCISED


def test_custom_roots_tangent_solve_is_reached_in_both_modes(project):
    root, scenarios = project
    cells, records, _ = records_and_summary(root, [scenarios["root/jacobian"]], REVERSE + FORWARD)
    assert {cell.backend: records[cell.key].rules[ROOT] for cell in cells} == dict.fromkeys(
        REVERSE + FORWARD, ["solve", "tangent_solve"])


def test_verdicts_are_the_same_with_and_without_rule_coverage(project):
    root, scenarios = project
    everything = list(scenarios.values())
    with_coverage, _ = checked(root, everything, REVERSE + FORWARD, tracer=RuleTracer(root))
    without, _ = checked(root, everything, REVERSE + FORWARD)
    assert [(c.key, c.status, c.message) for c in with_coverage] == [(c.key, c.status, c.message) for c in without]
    assert {c.status for c in with_coverage} == {Status.PASS}


@LINEAR_SCENARIOS
def test_a_1e_3_error_in_transpose_solve_in_float64_is_caught_at_or_below_1e_3(project, name):
    root, scenarios = project
    scenario = scenarios[name]
    backends = resolve_backends(REVERSE + FORWARD)
    tracer = RuleTracer(root)
    cells, references = checked(root, [scenario], REVERSE + FORWARD, tracer=tracer)
    rules = tracer.rules()
    records = {cell.key: tracer.take(cell.key, rules) for cell in cells}
    objects = rule_objects(root)[LINEAR]

    def with_plant(plant: Plant) -> dict[str, Status]:
        with planted(objects, CUSTOM_LINEAR_SOLVE, "transpose_solve", plant, root) as state, \
                tracing(cast("RuleTracer", state)):
            again = check_scenario(scenario, backends, ["cpu"], ["float64"], references)
        assert {cell.backend for cell in again if state.applied[cell.key]} == set(REVERSE)
        return {cell.backend: cell.status for cell in again}

    assert with_plant(Plant(SCALE, 0, 1e-3)) == {"jax-rev": Status.FAIL, "jax-rev-jit": Status.FAIL,
                                                 "jax-fwd": Status.PASS}
    assert set(with_plant(Plant(PROBE)).values()) == {Status.PASS}  # the wrapper alone changes nothing
    assert set(with_plant(Plant(SCALE, 0, 1e-12)).values()) == {Status.PASS}  # below float64's tolerance

    powers = measure_power(scenario, cells, records, rules, root, backends, references)
    assert {key[1] for key in powers} == set(REVERSE)  # the forward cell reaches nothing a plant goes into
    for power in powers.values():
        plants = {plant.kind: plant for plant in power.plants if plant.rule == LINEAR}
        assert plants[SCALE].method == "transpose_solve" and plants[SCALE].outcome == CAUGHT
        assert plants[SCALE].smallest_delta is not None and plants[SCALE].smallest_delta <= 1e-3
        assert plants[SIGN].outcome == CAUGHT


def test_a_plant_in_transpose_solve_leaves_the_value_and_forward_mode_alone(project):
    import jax
    import jax.numpy as jnp

    root, _ = project
    from solverops.ops import solve_linear

    b, tangent = jnp.array([0.5, -1.0, 2.0]), jnp.array([1.0, 0.0, 0.0])

    def derivatives():
        value, pushed = jax.jvp(solve_linear, (b,), (tangent,))
        _, pull = jax.vjp(solve_linear, b)
        return np.asarray(value), np.asarray(pushed), np.asarray(pull(tangent)[0])

    before = derivatives()
    with planted(rule_objects(root)[LINEAR], CUSTOM_LINEAR_SOLVE, "transpose_solve", Plant(SCALE, 0, 0.1), root):
        during = derivatives()
    np.testing.assert_array_equal(during[0], before[0])  # the value: solve's
    np.testing.assert_array_equal(during[1], before[1])  # forward mode: solve's too
    assert not np.allclose(during[2], before[2])  # reverse mode: transpose_solve's, planted
    np.testing.assert_array_equal(derivatives()[2], before[2])  # and restored after


def test_a_1e_3_error_in_tangent_solve_is_caught_in_both_modes(project):
    root, scenarios = project
    scenario = scenarios["root/jacobian"]
    tracer = RuleTracer(root)
    cells, references = checked(root, [scenario], REVERSE + FORWARD, tracer=tracer)
    rules = tracer.rules()
    records = {cell.key: tracer.take(cell.key, rules) for cell in cells}
    powers = measure_power(scenario, cells, records, rules, root, resolve_backends(REVERSE + FORWARD), references)
    assert {key[1] for key in powers} == set(REVERSE + FORWARD)
    for power in powers.values():
        scale = next(plant for plant in power.plants if plant.kind == SCALE)
        assert (scale.rule, scale.method, scale.outcome) == (ROOT, "tangent_solve", CAUGHT)
        assert scale.smallest_delta is not None and scale.smallest_delta <= 1e-3
