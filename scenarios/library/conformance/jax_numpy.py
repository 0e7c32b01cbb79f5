"""jax.numpy: elementwise functions, contractions, reductions and scans, jax.numpy.linalg and fft."""
from __future__ import annotations

import numpy as np

from ._table import JACOBIAN, JVP, VJP, Row, distinct_spectrum, signed, spread, well_conditioned

AREA = "jax.numpy"
J = "jax.numpy."
L = "jax.numpy.linalg."
WELL = well_conditioned()


def pair(f, x):
    return f(x[0], x[1])


def untied(g: np.random.Generator, shape: tuple) -> np.ndarray:
    """Two rows at least 0.3 apart elementwise: no ties for maximum, minimum, arctan2."""
    first = g.uniform(-2, 2, size=shape[1:])
    return np.array([first, first + g.choice([-1.0, 1.0], size=shape[1:]) * g.uniform(0.3, 1.0, size=shape[1:])])


def between_nodes(g, shape):
    """Points at least 0.05 from interp's nodes 0, 1/3, 2/3, 1, where its slope jumps."""
    return g.choice([0.05, 0.4, 0.72], size=shape) + g.uniform(0, 0.22, size=shape)


ROWS = (
    # elementwise
    Row(J + "sin", (), (-2, 2), ("derivative",)),
    Row(J + "cos", (5,), (-2, 2), VJP),
    Row(J + "tan", (), (-1.2, 1.2), ("second_derivative",)),
    Row(J + "arcsin", (5,), (-0.8, 0.8), JVP),
    Row(J + "arccos", (), (-0.8, 0.8), ("derivative",)),
    Row(J + "arctan", (4,), (-2, 2), ("hvp",)),
    Row(J + "sinh", (5,), (-2, 2), VJP),
    Row(J + "cosh", (), (-2, 2), ("second_derivative",)),
    Row(J + "tanh", (4,), (-2, 2), ("hessian",)),
    Row(J + "arcsinh", (5,), (-2, 2), JVP),
    Row(J + "arccosh", (), (1.2, 3), ("derivative",)),
    Row(J + "arctanh", (5,), (-0.8, 0.8), VJP),
    Row(J + "exp", (4,), (-2, 2), ("hvp",)),
    Row(J + "exp2", (), (-2, 2), ("second_derivative",)),
    Row(J + "expm1", (5,), (-2, 2), JVP),
    Row(J + "log", (), (0.2, 3), ("derivative",)),
    Row(J + "log2", (5,), (0.2, 3), VJP),
    Row(J + "log10", (5,), (0.2, 3), JVP),
    Row(J + "log1p", (), (-0.5, 2), ("second_derivative",)),
    Row(J + "sqrt", (4,), (0.2, 3), ("hessian",)),
    Row(J + "cbrt", (5,), signed(0.2, 2), VJP),
    Row(J + "reciprocal", (), signed(0.3, 2), ("derivative",)),
    Row(J + "power", (5,), (0.2, 3), JVP, call=lambda f, x: f(x, 2.5)),
    Row(J + "float_power", (2, 4), (0.3, 2), VJP, call=pair),
    Row(J + "sinc", (5,), signed(0.2, 2), JVP),
    Row(J + "abs", (5,), signed(0.2, 2), VJP),
    Row(J + "clip", (6,), (-0.8, 0.8), JVP, kwargs={"min": -1.0, "max": 1.0}),
    Row(J + "copysign", (2, 4), signed(0.2, 2), VJP, call=pair),
    Row(J + "i0", (), (-2, 2), ("second_derivative",)),
    Row(J + "logaddexp", (2, 4), (-2, 2), JVP, call=pair),
    Row(J + "logaddexp2", (2, 4), (-2, 2), VJP, call=pair),
    Row(J + "hypot", (2, 4), signed(0.2, 2), JVP, call=pair),
    Row(J + "arctan2", (2, 4), untied, VJP, call=pair),
    Row(J + "maximum", (2, 4), untied, JVP, call=pair),
    Row(J + "minimum", (2, 4), untied, VJP, call=pair),
    Row(J + "polyval", (5,), (-1, 1), JVP, call=lambda f, x, c: f(c, x), contexts=(((4,), (-1, 1)),)),
    Row(J + "interp", (5,), between_nodes, VJP, contexts=(((4,), lambda g, shape: np.linspace(0, 1, *shape)),
                                                       ((4,), (-1, 1)))),
    # contractions
    Row(J + "convolve", (5,), (-1, 1), JVP, contexts=(((3,), (-1, 1)),)),
    Row(J + "correlate", (5,), (-1, 1), VJP, kwargs={"mode": "full"}, contexts=(((3,), (-1, 1)),)),
    Row(J + "outer", (2, 3), (-1, 1), JACOBIAN, call=pair),
    Row(J + "kron", (2, 2), (-1, 1), JVP, call=lambda f, x: f(x, x)),
    Row(J + "cross", (2, 3), (-1, 1), VJP, call=pair),
    Row(J + "matmul", (2, 2), (-1, 1), JACOBIAN + ("hvp",), call=lambda f, x: f(x, f(x, x))),
    Row(J + "vdot", (2, 4), (-1, 1), ("gradient",), call=pair),
    Row(J + "einsum", (3, 2), (-1, 1), JVP, call=lambda f, x: f("ij,kj->ik", x, x)),
    Row(J + "tensordot", (2, 3), (-1, 1), VJP, kwargs={"axes": 1}, contexts=(((3, 2), (-1, 1)),)),
    # reductions and scans
    Row(J + "sum", (2, 3), (-1, 1), JVP, kwargs={"axis": 1}),
    Row(J + "mean", (2, 3), (-1, 1), JACOBIAN, kwargs={"axis": 0}),
    Row(J + "prod", (5,), signed(0.3, 1.5), JACOBIAN),
    Row(J + "std", (5,), (-1, 1), VJP + ("gradient",)),
    Row(J + "var", (4,), (-1, 1), ("hessian",)),
    Row(J + "max", (2, 4), spread(-2, 2), JVP, kwargs={"axis": 1}),
    Row(J + "min", (6,), spread(-2, 2), ("value_and_gradient",)),
    Row(J + "ptp", (6,), spread(-2, 2), ("gradient",)),
    Row(J + "median", (5,), spread(-2, 2), VJP),
    Row(J + "quantile", (5,), spread(-2, 2), JVP, kwargs={"q": 0.3}),
    Row(J + "percentile", (5,), spread(-2, 2), VJP, kwargs={"q": 70.0}),
    Row(J + "average", (6,), (-1, 1), JVP, call=lambda f, x, w: f(x, weights=w), contexts=(((6,), (0.5, 3)),)),
    Row(J + "nanmean", (6,), (-1, 1), VJP),
    Row(J + "sort", (5,), spread(-2, 2), JACOBIAN),
    Row(J + "cumsum", (6,), (-1, 1), JVP),
    Row(J + "cumprod", (6,), signed(0.3, 1.5), JACOBIAN),
    Row(J + "diff", (6,), (-1, 1), VJP),
    Row(J + "trapezoid", (6,), (-1, 1), ("value_and_gradient",)),
    Row(J + "trace", (3, 3), (-1, 1), JVP),
    Row(J + "fft.rfft", (6,), (-1, 1), VJP, call=lambda f, x: f(x).imag),
    Row(J + "fft.irfft", (5,), (-1, 1), JVP, kwargs={"n": 8}),
    # jax.numpy.linalg
    Row(L + "det", (3, 3), WELL, ("gradient", "jvp", "vjp")),
    Row(L + "det", (2, 2), WELL, ("hvp",), label="2x2"),
    Row(L + "slogdet", (3, 3), WELL, VJP, call=lambda f, x: f(x)[1]),
    Row(L + "inv", (3, 3), WELL, JACOBIAN),
    Row(L + "solve", (3, 3), WELL, JVP, contexts=(((3, 2), (-1, 1)),)),
    Row(L + "cholesky", (3, 3), WELL, JACOBIAN, call=lambda f, x: f(x @ x.T)),
    Row(L + "qr", (3, 3), WELL, VJP, call=lambda f, x: f(x)[1]),
    Row(L + "eigh", (3, 3), distinct_spectrum, JVP, call=lambda f, x: f(x + x.T)[0]),
    Row(L + "eigvalsh", (2, 2), distinct_spectrum, ("hessian",), call=lambda f, x: f(x + x.T)),
    Row(L + "svd", (3, 2), distinct_spectrum, VJP, call=lambda f, x: f(x, compute_uv=False)),
    Row(L + "norm", (6,), (-1, 1), JVP + ("gradient",)),
    Row(L + "matrix_norm", (3, 3), distinct_spectrum, VJP, kwargs={"ord": "nuc"}),
    Row(L + "pinv", (3, 2), distinct_spectrum, JVP),
    Row(L + "matrix_power", (3, 3), (-1, 1), VJP, kwargs={"n": 3}),
    Row(L + "multi_dot", (2, 2), (-1, 1), ("hvp",), call=lambda f, x: f([x, x.T, x])),
    Row(L + "lstsq", (3, 2), distinct_spectrum, JVP, call=lambda f, x, b: f(x, b)[0],
        contexts=(((3,), (-1, 1)),)),
    Row(L + "cond", (3, 3), distinct_spectrum, VJP),
)
