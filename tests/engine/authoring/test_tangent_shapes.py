"""A tangent or cotangent of the wrong shape is refused with the shape it must have, not run into a crash.

A tangent is shaped like x, refused at construction; a cotangent like f(x), refused where f(x) is first
known (the reference), on every cell. Both used to end deep in a cell (a broadcast or matmul error of
numpy or torch) or, for a tangent of another structure, pass on a backend that read it leaf by leaf.
"""
from __future__ import annotations

import numpy as np
import pytest

import gradci
from gradci import Scenario
from gradci.scenarios.authoring.scenario import Tangents
from gradci.scenarios.contract.errors import ScenarioInputError
from gradci.scenarios.reference.answer import ReferenceCache

X = np.array([0.3, -1.2, 0.8])


def pairwise(x):
    return x[:2] * x[1:]  # f(x) has shape (2,), x (3,)


@pytest.mark.parametrize(("operator", "f"), [("jvp", pairwise), ("hvp", lambda x: (x ** 3).sum())])
def test_a_tangent_not_shaped_like_x_is_refused_at_construction_naming_xs_shape(operator, f):
    with pytest.raises(ScenarioInputError, match=r"needs the tangent shaped like x.*expected shape \(3,\); got shape \(4,\)"):
        Scenario("t", operator, f, X, tangent=np.ones(4))


def test_a_tangent_of_another_structure_is_refused_even_where_its_sizes_add_up():
    with pytest.raises(ScenarioInputError, match=r"expected shape \(3,\); got \{'a': shape \(3,\)\}"):
        Scenario("t", "jvp", pairwise, X, tangent={"a": np.ones(3)})
    with pytest.raises(ScenarioInputError, match=r"tangent 1 of the batch.*expected \{'u': shape \(3,\), 'v': shape \(2,\)\}"):
        Scenario("t", "jvp", lambda x: x["u"].sum() * x["v"], {"u": X, "v": X[:2]},
                 tangent=Tangents([{"u": X, "v": X[:2]}, {"u": X, "v": X}]))


def test_a_tangent_shaped_like_x_is_kept():
    assert Scenario("t", "jvp", pairwise, X, tangent=np.ones(3)).tangent.shape == (3,)


def test_a_cotangent_not_shaped_like_f_of_x_is_an_error_on_every_cell_naming_f_of_xs_shape():
    scenario = Scenario("ct", "vjp", pairwise, X, tangent=np.ones(3))  # f(x) has 2 elements
    cells = gradci.check([scenario], backends=["torch-rev", "jax-rev"], devices=["cpu"], dtypes=["float64"],
                         references=ReferenceCache()).cells
    assert {c.status for c in cells} == {"error"}
    for cell in cells:
        assert "needs the cotangent shaped like f(x)" in cell.message
        assert "expected shape (2,); got shape (3,)" in cell.message
    right = Scenario("ct", "vjp", pairwise, X, tangent=np.ones(2))
    assert {c.status for c in gradci.check([right], backends=["torch-rev", "jax-rev"], devices=["cpu"],
                                           dtypes=["float64"], references=ReferenceCache()).cells} == {"pass"}
