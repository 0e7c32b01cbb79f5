"""A declared sparsity pattern: a nonzero outside it fails the cell naming the entry, a pattern the
reference contradicts is the scenario's error, and correct sparse functions pass everywhere."""
from __future__ import annotations

import numpy as np
import pytest

import gradci
from gradci import Scenario
from gradci.scenarios.contract.errors import ScenarioInputError
from gradci.scenarios.library.sparse import arrow, arrowhead, band, tridiagonal
from gradci.scenarios.reference.answer import ReferenceCache

jax = pytest.importorskip("jax")
pytest.importorskip("torch")

X = np.array([0.3, -0.7, 1.1, 0.5, -0.2, 0.9])


def leaking_tridiagonal():
    """The tridiagonal f in jax with a custom_vjp whose bwd leaks half of y[0]'s cotangent into x[-1]."""
    import jax.numpy as jnp

    @jax.custom_vjp
    def f(x):
        return tridiagonal(x)

    def fwd(x):
        return f(x), x

    def bwd(x, g):
        (true,) = jax.vjp(tridiagonal, x)[1](g)
        return (true.at[-1].add(0.5 * g[0]),)

    f.defvjp(fwd, bwd)
    return lambda x: f(jnp.asarray(x))


def check(scenario, backends=None, dtypes=("float64", "float32")):
    return gradci.check([scenario], backends=backends, devices=["cpu"], dtypes=list(dtypes),
                        references=ReferenceCache()).cells


def not_passing(cells):
    return [(c.backend, c.dtype, c.status, c.message) for c in cells if c.status not in ("pass", "skip")]


@pytest.mark.parametrize("shaped_like_result", [True, False])
def test_a_tridiagonal_jacobian_and_an_arrowhead_hessian_pass_within_their_patterns(shaped_like_result):
    n = X.size
    jacobian = Scenario("tridiagonal", "jacobian", tridiagonal, X, sparsity=band(n))
    hessian = Scenario("arrowhead", "hessian", arrowhead, X,
                       sparsity=arrow(n) if shaped_like_result else arrow(n).astype(int))
    for scenario in (jacobian, hessian):
        cells = check(scenario)
        assert [c for c in cells if c.status == "pass"] and not not_passing(cells), not_passing(cells)


def test_a_custom_vjp_leaking_outside_the_pattern_fails_naming_the_entry():
    s = Scenario("leaky-tridiagonal", "jacobian", {"jax": leaking_tridiagonal()}, X, sparsity=band(X.size))
    cells = check(s, backends=["jax-rev-jit"])
    assert cells and all(c.status == "fail" for c in cells), not_passing(cells)
    for cell in cells:
        assert "outside the declared sparsity pattern at (row 0, column 5): 0.5" in cell.message, cell.message


def test_the_leak_is_not_flagged_where_the_pattern_allows_the_entry():
    """Twin of the above: with the pattern dense, the same leak is only a wrong value (not a pattern failure)."""
    s = Scenario("leaky-dense", "jacobian", {"jax": leaking_tridiagonal()}, X, sparsity=np.ones((6, 6), bool))
    (cell,) = check(s, backends=["jax-rev-jit"], dtypes=["float64"])
    assert cell.status == "fail" and "sparsity" not in cell.message, cell.message


def test_a_pattern_too_sparse_for_f_is_the_scenarios_error_on_every_cell():
    s = Scenario("diagonal-claimed", "jacobian", tridiagonal, X, sparsity=np.eye(X.size, dtype=bool))
    cells = check(s, backends=["jax-fwd", "torch-rev"])
    assert cells and all(c.status == "error" for c in cells), not_passing(cells)
    for cell in cells:
        assert "declared sparsity pattern leaves out (row 0, column 1)" in cell.message, cell.message
        assert "the scenario's error and not a backend's" in cell.message


def test_a_conservative_pattern_passes():
    """More entries declared than f has (a band of 2 around a tridiagonal f) is not an error."""
    cells = check(Scenario("wide-band", "jacobian", tridiagonal, X, sparsity=np.abs(np.subtract.outer(range(6), range(6))) <= 2),
                  backends=["jax-fwd", "torch-rev"])
    assert cells and not not_passing(cells), not_passing(cells)


@pytest.mark.parametrize(("kwargs", "says"), [
    (dict(operator="gradient", f=arrowhead, x=X, sparsity=arrow(6)), "this is a gradient scenario"),
    (dict(operator="jacobian", f=lambda t: t, x={"a": X}, sparsity=band(6)), "not a pytree"),
    (dict(operator="hessian", f=arrowhead, x=X, sparsity=band(5)), "has shape (5, 5)"),
    (dict(operator="jacobian", f=tridiagonal, x=X, sparsity=band(6) * 0.5), "must be a boolean numpy array"),
])
def test_a_malformed_sparsity_is_refused_at_construction(kwargs, says):
    with pytest.raises(ScenarioInputError) as raised:
        Scenario("bad-sparsity", **kwargs)
    assert says in str(raised.value)


def test_finite_differences_noise_outside_the_pattern_is_not_a_leak():
    """The fd backend's off-pattern entries are noise within its own error estimate: it passes."""
    x = X[:4]
    cells = check(Scenario("arrowhead-fd", "hessian", arrowhead, x, sparsity=arrow(4)), backends=["fd"],
                  dtypes=["float64"])
    assert cells and all(c.status == "pass" for c in cells), not_passing(cells)
