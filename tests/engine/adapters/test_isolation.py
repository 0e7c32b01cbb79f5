"""Isolation of data: the scenario's arrays are identical, bit for bit, after a check, however the
function treats what it is given; every backend and the reference get their own copies."""
from __future__ import annotations

import numpy as np

import gradci
from gradci import Scenario


def _copies(scenario):
    return [np.array(a, copy=True) for a in (scenario.x, *scenario.contexts)]


def test_scribbling_function_leaves_the_scenario_bit_for_bit_intact():
    def numpy_scribbler(x, c, counter):
        value = np.sum(x * x * c)
        x += 1.0  # the reference's evaluations must each get arrays of their own
        c *= 3.0
        counter += 1.0
        return value

    def torch_scribbler(x, c, counter):
        counter.add_(1.0)  # torch.as_tensor would have shared this memory with the scenario (float64)
        return (x * x * c).sum()

    s = Scenario("scribbler", "gradient", {"numpy": numpy_scribbler, "torch": torch_scribbler},
                 np.array([0.5, -1.5]), contexts=(np.array([2.0, 4.0]), np.array([0.0])), state=(1,))
    before = _copies(s)
    report = gradci.check([s], backends=["torch-rev", "torch-func-rev", "fd"], devices=["cpu"],
                             dtypes=["float64"])
    assert all(np.array_equal(a, b) for a, b in zip(before, _copies(s)))
    # the reference saw the declared point at every evaluation: the derivative is right
    assert {c.status for c in report.cells} == {"pass"}, [c.message for c in report.cells]


def test_correct_twin_of_a_pure_function_is_intact_too():
    s = Scenario("pure", "gradient", lambda x, c: gradci.namespace(x).sum(x * c), np.array([1.0, 2.0]),
                 contexts=(np.array([3.0, 4.0]),))
    before = _copies(s)
    report = gradci.check([s], backends=["torch-rev", "jax-rev"], devices=["cpu"], dtypes=["float64"])
    assert report.ok and all(np.array_equal(a, b) for a, b in zip(before, _copies(s)))


def test_every_backend_gets_its_own_copy():
    from gradci.scenarios.backends import get_backend

    x = np.array([1.0, 2.0])
    s = Scenario("own", "gradient", lambda x: gradci.namespace(x).sum(x * x), x)
    for name in ("torch-rev", "torch-func-rev", "jax-rev"):
        prepared = get_backend(name).prepare(s, None, "cpu", "float64")
        held = np.asarray(prepared.inputs[0].detach() if hasattr(prepared.inputs[0], "detach") else prepared.inputs[0])
        assert not np.shares_memory(held, s.x), name
