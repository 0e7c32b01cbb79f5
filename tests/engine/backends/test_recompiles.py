"""A compiled cell that traces or compiles again at the same shapes fails with the count; planted twins."""
from __future__ import annotations

import pytest

import gradci
from gradci import Scenario
from gradci._testing import planted
from gradci.scenarios.check import check_scenario
from gradci.scenarios.contract.errors import ScenarioInputError
from gradci.scenarios.reference.answer import ReferenceCache

pytest.importorskip("jax")


def _scenario(f, **options) -> Scenario:
    return Scenario("recompile/loss", "gradient", {"jax": f, "numpy": planted.numpy_loss}, planted.X,
                    dtypes=("float64",), **options)


def test_a_function_that_changes_jit_cache_keys_while_tracing_fails_with_the_count():
    report = gradci.check([_scenario(planted.jax_retracing_loss())], backends=["jax-rev-jit", "jax-fwd"],
                          devices=["cpu"])
    for cell in report.cells:
        assert cell.status == "fail", (cell.backend, cell.message)
        assert f"{cell.backend} traced 1 and compiled 1 program again" in cell.message, cell.message


def test_declared_retraces_warn_instead():
    report = gradci.check([_scenario(planted.jax_retracing_loss(), retraces=True)], backends=["jax-rev-jit"],
                          devices=["cpu"])
    (cell,) = report.cells
    assert cell.status == "pass", cell.message
    assert "traced 1 and compiled 1 program again" in cell.warnings, cell.warnings


def test_the_correct_twin_traces_once():
    report = gradci.check([_scenario(planted.loss_with(planted.jax_sin_vjp()))], backends=["jax-rev-jit"],
                          devices=["cpu"])
    assert [c.status for c in report.cells] == ["pass"], [c.message for c in report.cells]


@pytest.mark.parametrize("fresh", [True, False])
def test_a_backend_jitting_a_fresh_closure_per_call_fails_and_its_twin_passes(fresh):
    backend = planted.jax_backend_jitting_a_fresh_closure_per_call(fresh)
    (cell,) = check_scenario(_scenario(planted.loss_with(planted.jax_sin_vjp())), [backend], ["cpu"], None,
                             ReferenceCache())
    if fresh:
        assert cell.status == "fail" and "traced 1 and compiled 1 program again" in cell.message, cell.message
    else:
        assert cell.status == "pass", cell.message


def test_retraces_must_be_a_bool():
    with pytest.raises(ScenarioInputError, match="retraces must be True or False"):
        _scenario(planted.numpy_loss, retraces="yes")
