"""torch.linalg: determinants, inverses and solves, factorizations, spectra, norms, matrix functions."""
from __future__ import annotations

from ._table import FULL, JACOBIAN, JVP, LOSS, SECOND, VJP, Row, distinct_spectrum, on_every, spread, well_conditioned

AREA = "torch.linalg"
L = "torch.linalg."
WELL = well_conditioned()


def eigenvector_projector(f, x):
    """v vᵀ of the lowest eigenvector: a smooth function of x, whatever sign the solver picks for v."""
    v = f(x + x.mT)[1][..., :1]
    return v @ v.mT


def singular_projector(f, x):
    u = f(x, full_matrices=False)[0][..., :1]
    return u @ u.mT


# Differentiating the forward-mode rules of det, slogdet and solve again, in either mode (forward
# over forward, reverse over forward), treats A⁻¹ as a constant.
NESTED_FORWARD = on_every(SECOND, dict.fromkeys(
    ("torch-func-fwd", "torch-func-rev-fwd"),
    "upstream: https://github.com/pytorch/pytorch/issues/196696 (also #192540, #196697) second derivatives "
    "through the forward-mode rule of det/slogdet/solve are wrong"))


def sorted_real(values):
    """Real parts in ascending order: LAPACK's eigenvalue order differs between dtypes."""
    return values.real.sort().values


ROWS = (
    Row(L + "det", (3, 3), WELL, ("gradient", "jvp", "vjp")),
    Row(L + "det", (2, 2), WELL, SECOND, label="2x2", xfail=NESTED_FORWARD),
    Row(L + "slogdet", (3, 3), WELL, VJP + ("gradient",), call=lambda f, x: f(x)[1]),
    Row(L + "slogdet", (2, 2), WELL, SECOND, label="2x2", call=lambda f, x: f(x)[1], xfail=NESTED_FORWARD),
    Row("torch.logdet", (3, 3), WELL, JVP, call=lambda f, x: f(x @ x.mT)),
    Row(L + "inv", (3, 3), WELL, FULL),
    Row(L + "inv", (2, 2), WELL, SECOND, label="2x2"),
    Row(L + "inv_ex", (3, 3), WELL, VJP, call=lambda f, x: f(x)[0]),
    Row(L + "solve", (3, 3), WELL, JACOBIAN, contexts=(((3, 2), (-1, 1)),)),
    Row(L + "solve", (2, 2), WELL, SECOND, label="2x2", contexts=(((2,), (-1, 1)),), xfail=NESTED_FORWARD),
    Row(L + "solve", (3, 2), (-1, 1), JVP, label="rhs", call=lambda f, b, a: f(a, b), contexts=(((3, 3), WELL),)),
    Row(L + "solve_triangular", (3, 3), WELL, VJP, call=lambda f, x, b: f(x.triu(), b, upper=True),
        contexts=(((3, 2), (-1, 1)),)),
    Row(L + "cholesky", (3, 3), WELL, FULL, call=lambda f, x: f(x @ x.mT)),
    Row(L + "cholesky_ex", (2, 2), WELL, SECOND, call=lambda f, x: f(x @ x.mT)[0]),
    Row(L + "qr", (3, 3), WELL, JVP, call=lambda f, x: f(x)[1]),
    Row(L + "qr", (3, 2), (-1, 1), VJP, label="Q", call=lambda f, x: f(x)[0]),
    Row(L + "eigh", (3, 3), distinct_spectrum, JVP, call=lambda f, x: f(x + x.mT)[0]),
    Row(L + "eigh", (3, 3), distinct_spectrum, VJP, label="vectors", call=eigenvector_projector),
    Row(L + "eigvalsh", (3, 3), distinct_spectrum, JACOBIAN, call=lambda f, x: f(x + x.mT)),
    Row(L + "eigvals", (3, 3), distinct_spectrum, JVP, call=lambda f, x: sorted_real(f(x))),
    Row(L + "eig", (2, 2), distinct_spectrum, VJP, call=lambda f, x: sorted_real(f(x)[0])),
    Row(L + "svd", (3, 2), distinct_spectrum, JVP, label="vectors", call=singular_projector),
    Row(L + "svdvals", (3, 3), distinct_spectrum, FULL),
    Row(L + "matrix_norm", (3, 3), (-1, 1), LOSS + ("jvp",)),
    Row(L + "matrix_norm", (3, 3), distinct_spectrum, VJP, label="nuc", kwargs={"ord": "nuc"}),
    Row(L + "matrix_norm", (3, 3), distinct_spectrum, JVP, label="2", kwargs={"ord": 2}),
    Row(L + "vector_norm", (6,), (-1, 1), FULL),
    Row(L + "vector_norm", (6,), (-1, 1), VJP, label="3", kwargs={"ord": 3}),
    Row(L + "vector_norm", (6,), spread(-2, 2), JVP, label="inf", kwargs={"ord": float("inf")}),
    Row(L + "norm", (4,), (-1, 1), SECOND),
    Row(L + "matrix_exp", (3, 3), (-1, 1), FULL),
    Row(L + "matrix_exp", (2, 2), (-1, 1), SECOND, label="2x2"),
    Row(L + "pinv", (3, 2), distinct_spectrum, FULL),
    Row(L + "lstsq", (3, 2), distinct_spectrum, VJP, call=lambda f, x, b: f(x, b).solution,
        contexts=(((3, 1), (-1, 1)),)),
    Row(L + "lu_factor", (3, 3), WELL, JVP, call=lambda f, x: f(x)[0]),
    Row(L + "lu", (3, 3), WELL, VJP, call=lambda f, x: f(x)[2]),
    Row(L + "matrix_power", (3, 3), (-1, 1), FULL, kwargs={"n": 3}),
    Row(L + "matrix_power", (3, 3), WELL, JVP, label="-2", kwargs={"n": -2}),
    Row(L + "multi_dot", (2, 2), (-1, 1), VJP + SECOND, call=lambda f, x, b: f([x, b, x]),
        contexts=(((2, 2), (-1, 1)),)),
    Row(L + "cross", (2, 3), (-1, 1), JACOBIAN, call=lambda f, x: f(x[0], x[1])),
    Row(L + "householder_product", (3, 2), (-1, 1), JVP, contexts=(((2,), (0.5, 1.5)),)),
    Row(L + "vander", (4,), (-1, 1), FULL, kwargs={"N": 3}),
    Row(L + "vecdot", (2, 4), (-1, 1), ("gradient",), call=lambda f, x: f(x[0], x[1])),
    Row(L + "diagonal", (3, 3), (-1, 1), VJP),
    Row(L + "cond", (3, 3), distinct_spectrum, JVP),
    Row(L + "tensorsolve", (2, 2), WELL, VJP, call=lambda f, x, b: f(x, b), contexts=(((2,), (-1, 1)),)),
)
