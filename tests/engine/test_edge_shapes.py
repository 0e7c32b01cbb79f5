"""Empty batches and one-element inputs: accepted, differentiated and checked on every backend.

Real code receives empty batches. A rule that crashes on one or answers in another shape is a bug
users hit: each is planted here beside its correct twin.
"""
from __future__ import annotations

import numpy as np
import pytest

import gradci
from gradci import Scenario
from gradci._testing import planted
from gradci.scenarios.operators.records import OPERATOR_RECORDS
from gradci.scenarios.reference.answer import ReferenceCache

TORCH_REVERSE = ["torch-rev", "torch-func-rev"]
# torch.func.jacfwd vmaps over x's elements and torch's vmap refuses a dimension of size 0 in some
# compositions (pytorch#46846); torch.autograd.functional.jacobian raises on empty inputs: the
# library declares those cells. These tests check rules, where the frameworks let them run.
TORCH_ALL = ["torch-rev", "torch-func-rev", "torch-func-fwd", "torch-fwd"]
JAX_REVERSE = ["jax-rev", "jax-rev-jit"]


def sum_of_squares(x):
    return gradci.namespace(x).sum(x ** 2 * 0.5 + gradci.namespace(x).sin(x))


def doubled(x):
    return gradci.namespace(x).sin(x) * 2.0


def _scenario(operator: str, x) -> Scenario:
    scalar = OPERATOR_RECORDS[operator].output == "scalar"
    tangent = np.ones_like(x) if operator in ("jvp", "vjp", "hvp") else None
    return Scenario(f"edge/{operator}/{np.shape(x)}", operator, sum_of_squares if scalar else doubled, x,
                    tangent=tangent)


@pytest.mark.parametrize("operator", ["gradient", "value_and_gradient", "jacobian", "jvp", "vjp", "hvp", "hessian"])
def test_the_reference_of_an_empty_input_is_empty_and_exact(operator):
    """No scipy call on zero elements, no division by zero: the empty derivative in its shape."""
    x = np.zeros((3, 0))
    answer = ReferenceCache().answer(_scenario(operator, x))
    assert answer.error is None, answer.error
    (reference,) = answer.refs
    expected = {"gradient": (3, 0), "value_and_gradient": (3, 0), "jacobian": (3, 0, 3, 0), "jvp": (3, 0),
                "vjp": (3, 0), "hvp": (3, 0), "hessian": (3, 0, 3, 0)}[operator]
    assert np.shape(reference.full) == expected
    assert reference.is_full and np.shape(reference.full_error) == expected


def test_a_jacobian_from_a_nonempty_input_to_an_empty_output_has_no_rows():
    scenario = Scenario("edge/to-nothing", "jacobian", lambda x: x[:0] * 2.0, np.array([0.3, 0.4]))
    (reference,) = ReferenceCache().answer(scenario).refs
    assert np.shape(reference.full) == (0, 2)


@pytest.mark.parametrize("x", [np.zeros(0), np.array([0.4]), np.array(0.4)], ids=["empty", "one", "0-d"])
@pytest.mark.parametrize("operator", ["gradient", "value_and_gradient", "jvp", "vjp", "hvp"])
def test_correct_functions_pass_at_empty_one_element_and_0d_inputs(operator, x):
    # value_and_gradient on torch-fwd: an empty x runs no JVP, and the value must still come from f
    report = gradci.check([_scenario(operator, x)], devices=["cpu"], dtypes=["float64", "float32"],
                          backends=["torch-rev", "torch-func-rev", "torch-fwd", "jax-rev", "jax-rev-jit", "jax-fwd",
                                    "fd"])
    bad = [f"{c.backend} {c.dtype}: {c.status} {c.message}" for c in report.cells if c.status not in ("pass", "skip")]
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("operator", ["gradient", "vjp"])
def test_correct_rules_pass_on_an_empty_batch(operator):
    for framework, rule, backends in (("torch", planted.torch_batch_sin(), TORCH_REVERSE + ["torch-fwd"]),
                                      ("jax", planted.jax_batch_sin(), JAX_REVERSE)):
        report = gradci.check([_rule_scenario(framework, rule, operator)], backends=backends, devices=["cpu"],
                              dtypes=["float64", "float32"])
        assert {c.status for c in report.cells} == {"pass"}, [(c.backend, c.message) for c in report.cells]


@pytest.mark.parametrize("operator", ["gradient", "vjp"])
def test_a_rule_answering_in_the_wrong_shape_on_an_empty_batch_is_caught_naming_the_shapes(operator):
    for framework, rule, backends in (("torch", planted.torch_batch_sin("shape"), TORCH_REVERSE),
                                      ("jax", planted.jax_batch_sin("shape"), JAX_REVERSE)):
        report = gradci.check([_rule_scenario(framework, rule, operator)], backends=backends, devices=["cpu"])
        for cell in report.cells:
            assert cell.status in ("fail", "error"), (cell.backend, cell.message)
            assert ("[1]" in cell.message and "[0]" in cell.message) or \
                ("(1,)" in cell.message and "(0,)" in cell.message), (cell.backend, cell.message)


def test_a_rule_that_crashes_on_an_empty_batch_is_an_error_on_every_backend_that_calls_it():
    for framework, rule, backends in (("torch", planted.torch_batch_sin("crash"), TORCH_REVERSE),
                                      ("jax", planted.jax_batch_sin("crash"), JAX_REVERSE)):
        report = gradci.check([_rule_scenario(framework, rule, "gradient")], backends=backends, devices=["cpu"])
        assert {c.status for c in report.cells} == {"error"}
        assert all("max" in c.message for c in report.cells), [c.message for c in report.cells]


def test_a_forward_rule_that_answers_in_the_wrong_shape_is_caught_where_it_is_called():
    # jvp calls the rule with the tangent itself (forward mode builds a gradient from no JVP at all on
    # an empty batch: there is nothing to call it with).
    report = gradci.check([_rule_scenario("torch", planted.torch_batch_sin("shape"), "jvp")],
                          backends=["torch-func-fwd", "torch-fwd"], devices=["cpu"])
    for cell in report.cells:
        assert cell.status in ("fail", "error"), cell.message
        assert "[0]" in cell.message or "(0,)" in cell.message, cell.message


def test_an_empty_leaf_in_a_pytree_keeps_its_place_and_shape():
    x = {"batch": np.zeros(0), "w": np.array([0.3, -0.2])}

    def f(tree):
        xp = gradci.namespace(tree)
        return xp.sum(xp.sin(tree["w"])) * (1 + xp.sum(tree["batch"] ** 2))

    report = gradci.check([Scenario("edge/pytree", "gradient", f, x)], devices=["cpu"],
                          backends=["torch-rev", "torch-func-rev", "jax-rev-jit", "jax-fwd"])
    assert {c.status for c in report.cells} == {"pass"}, [(c.backend, c.message) for c in report.cells]


def _rule_scenario(framework: str, rule, operator: str) -> Scenario:
    scalar = OPERATOR_RECORDS[operator].output == "scalar"
    f = planted.loss_with(rule) if scalar else rule
    reference = planted.numpy_loss if scalar else np.sin
    tangent = np.zeros(0) if operator in ("jvp", "vjp") else None
    return Scenario(f"edge/{framework}-rule/{operator}", operator, {framework: f, "numpy": reference}, np.zeros(0),
                    tangent=tangent)


def test_the_librarys_edge_shape_rows_are_clean_on_every_default_backend():
    """The built-in empty and one-element rows: each cell passes, skips or is a declared torch bug (an
    undeclared error is gradci's own in a user's eyes: the demo showed four)."""
    from gradci.scenarios.backends import registry
    from gradci.scenarios.library import elementary

    rows = [s for s in elementary.scenarios() if s.name.startswith(("elementary/empty-", "elementary/one-"))]
    defaults = sorted(name for name, backend in registry().items() if backend.default)  # gradci check's own
    report = gradci.check(rows, backends=defaults, devices=["cpu"])
    bad = [(c.scenario, c.backend, c.dtype, c.status, c.message[:120]) for c in report.cells
           if c.status not in ("pass", "skip", "xfail")]
    assert rows and bad == []
