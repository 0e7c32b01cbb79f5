"""A prepared program run at another point than the one it was prepared at, and back (DIT's
"prepared at one input, run at another"): a compiled backend's cells run it at a second point drawn
near x and again at x; a scenario's declared ``second_point`` (another branch, a smaller input) is
run on every backend. Each result is judged against its own reference."""
from __future__ import annotations

import numpy as np
import pytest

import gradci
from gradci import Scenario, namespace
from gradci._testing.planted import jax_branch_frozen_when_traced, torch_sin_with_cached_derivative
from gradci.scenarios.backends.jax_backends import JaxBackend
from gradci.scenarios.check import check_scenario
from gradci.scenarios.contract.errors import ScenarioInputError
from gradci.scenarios.reference.answer import ReferenceCache
from gradci.scenarios.reference.second_point import second_point_of

X0 = np.array([0.5, -0.3, 0.8])
OTHER_BRANCH = np.array([-0.4, 0.6, 0.2])


def numpy_branch(x):
    return np.sum(x ** 2) if x[0] > 0 else np.sum(x ** 3)


def cells(scenario: Scenario, backends: list[str], dtypes=("float64",)):
    report = gradci.check([scenario], backends=backends, devices=["cpu"], dtypes=list(dtypes),
                          references=ReferenceCache())
    return {(cell.backend, cell.dtype): cell for cell in report.cells}


def branch_scenario(frozen: bool, **options) -> Scenario:
    f = {"numpy": numpy_branch, "jax": jax_branch_frozen_when_traced(frozen)}
    return Scenario("branch", "gradient", f, X0, second_point=OTHER_BRANCH, **options)


def test_a_jitted_program_that_kept_the_first_points_branch_fails_at_the_declared_second_point():
    found = cells(branch_scenario(frozen=True), ["jax-rev", "jax-rev-jit", "jax-fwd"])
    for cell in found.values():  # op by op too: jax.grad's x is traced, float() of it raises
        assert cell.status == "fail", (cell.backend, cell.message)
        assert "gives a wrong derivative at x₁ (the declared second_point)" in cell.message


def test_its_correct_twin_passes_at_the_second_point_on_every_backend_and_dtype():
    twin = branch_scenario(frozen=False)
    found = cells(twin, ["jax-rev", "jax-rev-jit", "jax-fwd", "torch-rev"], ("float64", "float32"))
    assert {cell.status for cell in found.values()} == {"pass"}, {k: c.message for k, c in found.items()}


def sin_scenario(sin, **options) -> Scenario:
    return Scenario("cached-sin", "gradient", {"numpy": lambda x: np.sum(np.sin(x)),
                                               "torch": lambda x: namespace(x).sum(sin(x))},
                    X0, dtypes=("float64",), **options)


def test_a_rule_that_caches_its_first_calls_derivative_is_caught_at_the_second_point():
    found = cells(sin_scenario(torch_sin_with_cached_derivative(cached=True), second_point=X0 * 1.5),
                  ["torch-rev", "torch-func-rev"])
    for cell in found.values():
        assert cell.status == "fail", cell.message
    assert "the derivative at x₁ equals the one at x₀" in found["torch-rev", "float64"].message


@pytest.mark.parametrize("second_point", [X0 * 1.5, X0[:2]], ids=["same-shape", "smaller"])
def test_the_rules_correct_twin_passes_at_the_second_point(second_point):
    found = cells(sin_scenario(torch_sin_with_cached_derivative(cached=False), second_point=second_point),
                  ["torch-rev", "torch-func-rev", "torch-fwd"])
    assert {cell.status for cell in found.values()} <= {"pass", "error"}
    assert all(cell.status == "pass" for key, cell in found.items() if key[0] != "torch-fwd"), found


def test_a_rule_that_caches_its_first_call_fails_at_a_smaller_input():
    found = cells(sin_scenario(torch_sin_with_cached_derivative(cached=True), second_point=X0[:2]), ["torch-rev"])
    cell = found["torch-rev", "float64"]
    assert cell.status == "error" and "raised at x₁ (the declared second_point, smaller)" in cell.message


class PointBaked(JaxBackend):
    """A jitted backend that compiles its first call's x into the program, as a constant."""

    def compile(self, computation):
        import jax

        kept: dict = {}

        def run(x, tangent, contexts):
            if "program" not in kept:
                kept["program"] = jax.jit(lambda t, c: computation(x, t, c))
            return kept["program"](tangent, contexts)

        return run


def test_a_compiled_backend_that_bakes_its_first_point_in_is_caught_without_a_declared_point():
    s = Scenario("sin-sum", "gradient", lambda x: namespace(x).sum(namespace(x).sin(x)), X0, dtypes=("float64",))
    (baked,) = check_scenario(s, [PointBaked("baked", "reverse", jit=True)], ["cpu"], None, ReferenceCache())
    assert baked.status == "fail" and "the derivative at x₁ equals the one at x₀" in baked.message, baked.message
    (fresh,) = check_scenario(s, [JaxBackend("fresh", "reverse", jit=True)], ["cpu"], None, ReferenceCache())
    assert fresh.status == "pass", fresh.message


def test_the_drawn_second_point_is_seeded_by_the_scenario_and_stays_on_xs_side_of_zero():
    s = Scenario("log", "gradient", lambda x: namespace(x).sum(namespace(x).log(x)), np.array([1e-9, 2.0, 0.0]))
    first, again = second_point_of(s), second_point_of(Scenario("log", "gradient", s.f, s.x))
    np.testing.assert_array_equal(first, again)
    assert np.all(first[:2] > 0) and not np.allclose(first[:2], s.x[:2]) and first[2] == 0.0


def test_a_second_point_where_f_is_not_finite_is_a_note_not_a_flag():
    def f(x):
        xp = namespace(x)
        return xp.sum(xp.sqrt(x))

    s = Scenario("sqrt", "gradient", f, np.array([0.5, 1.0]), second_point=np.array([-1.0, 1.0]),
                 dtypes=("float64",))
    found = cells(s, ["jax-rev-jit", "torch-rev"])
    for cell in found.values():
        assert cell.status == "pass", cell.message
        assert "not run at x₁" in cell.message


@pytest.mark.parametrize("point", [np.zeros(4), (X0, X0), np.zeros((3, 1))], ids=["larger", "pytree", "rank"])
def test_a_second_point_not_like_x_is_refused_when_the_scenario_is_made(point):
    with pytest.raises(ScenarioInputError, match="second_point must be structured like x"):
        Scenario("s", "gradient", lambda x: namespace(x).sum(x), X0, second_point=point)
