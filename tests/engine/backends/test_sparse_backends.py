"""The sparse jax backends (asdex, sparsejac): right where their pattern is, and a detected pattern
missing an entry the reference has fails naming it (a wrong pattern gives silently wrong derivatives)."""
from __future__ import annotations

import numpy as np
import pytest

import gradci
from gradci import Scenario
from gradci.scenarios.backends import get_backend
from gradci.scenarios.backends import sparse_backends as sparse
from gradci.scenarios.library.sparse import arrow, arrowhead, band, tridiagonal
from gradci.scenarios.reference.answer import ReferenceCache

pytest.importorskip("jax")
pytest.importorskip("asdex", reason="the sparse backends need asdex: pip install 'gradci[sparse]'")
pytest.importorskip("sparsejac", reason="jax-sparse-sparsejac needs sparsejac: pip install 'gradci[sparse]'")

SPARSE = ["jax-sparse-asdex", "jax-sparse-sparsejac"]
X = np.array([0.3, -0.7, 1.1, 0.5, -0.2, 0.9])


def check(scenario, backends=SPARSE, dtypes=("float64", "float32")):
    return gradci.check([scenario], backends=backends, devices=["cpu"], dtypes=list(dtypes),
                        references=ReferenceCache()).cells


def statuses(cells):
    return [(c.backend, c.dtype, c.status, c.message) for c in cells]


def scenarios(declared: bool):
    n = X.size
    return [Scenario("tridiagonal", "jacobian", tridiagonal, X, sparsity=band(n) if declared else None),
            Scenario("arrowhead", "hessian", arrowhead, X, sparsity=arrow(n) if declared else None),
            Scenario("tridiagonal-2d", "jacobian", tridiagonal, X, sparsity=None)]


@pytest.mark.parametrize("declared", [True, False])
def test_sparse_jacobians_and_hessians_pass_in_both_dtypes(declared):
    for scenario in scenarios(declared):
        cells = check(scenario)
        assert len(cells) == 4 and all(c.status == "pass" for c in cells), statuses(cells)


def test_a_matrix_shaped_x_keeps_its_shape():
    x = X.reshape(2, 3)
    s = Scenario("arrowhead-2d", "hessian", lambda z: arrowhead(gradci.namespace(z).reshape(z, (-1,))), x)
    cells = check(s)
    assert all(c.status == "pass" for c in cells), statuses(cells)


def drop_first_nonzero(detect):
    def dropping(operator, f_flat, x_flat):
        pattern = detect(operator, f_flat, x_flat).copy()
        pattern[tuple(np.argwhere(pattern)[0])] = False
        return pattern
    return dropping


@pytest.mark.parametrize("operator", ["jacobian", "hessian"])
def test_a_detected_pattern_missing_an_entry_fails_naming_it(monkeypatch, operator):
    monkeypatch.setattr(sparse, "detected_pattern", drop_first_nonzero(sparse.detected_pattern))
    f = tridiagonal if operator == "jacobian" else arrowhead
    cells = check(Scenario(f"dropped-{operator}", operator, f, X))
    assert len(cells) == 4 and all(c.status == "fail" for c in cells), statuses(cells)
    for cell in cells:
        assert "asdex's detected sparsity pattern leaves out (row 0, column 0), where" in cell.message, cell.message
        # A 6x6 Jacobian's reference is full; a 6x6 Hessian's is made of probes, which cannot name entries
        by = "the reference is" if operator == "jacobian" else "the framework's dense derivative"
        assert by in cell.message, cell.message


def test_sparsejac_computes_from_the_declared_pattern_not_the_detected_one(monkeypatch):
    """With sparsity= declared, a wrong detection does not reach jax-sparse-sparsejac; it does asdex's."""
    monkeypatch.setattr(sparse, "detected_pattern", drop_first_nonzero(sparse.detected_pattern))
    cells = check(Scenario("declared-band", "jacobian", tridiagonal, X, sparsity=band(X.size)), dtypes=["float64"])
    by_backend = {c.backend: c for c in cells}
    assert by_backend["jax-sparse-sparsejac"].status == "pass", statuses(cells)
    assert by_backend["jax-sparse-asdex"].status == "fail", statuses(cells)


def test_only_jacobian_and_hessian_cells_are_made():
    report = gradci.check([Scenario("grad", "gradient", arrowhead, X)], backends=SPARSE, devices=["cpu"],
                          references=ReferenceCache())
    assert report.cells == [] and report.omitted == 4


def test_without_the_library_the_backend_says_how_to_install_it(monkeypatch):
    backend = get_backend("jax-sparse-asdex")
    monkeypatch.setattr(backend, "library", "asdex_is_not_installed_here")
    assert backend.unavailable() == "asdex_is_not_installed_here is not installed: pip install 'gradci[sparse]'"
    assert not backend.default
