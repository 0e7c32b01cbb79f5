"""jax.lax: primitives, cumulative reductions, control flow, windows and convolutions, lax.linalg."""
from __future__ import annotations

from ._table import JACOBIAN, JVP, VJP, Row, distinct_spectrum, signed, spread, well_conditioned

AREA = "jax.lax"
X = "jax.lax."
WELL = well_conditioned()


def scanned(scan, x):
    """A recurrence h <- tanh(0.9 h + x_t) with its states as output."""
    import jax.numpy as jnp

    return scan(lambda h, x_t: (jnp.tanh(0.9 * h + x_t), h * x_t), x[0] * 0.0, x)[1]


def scanned_reverse(scan, x):
    import jax.numpy as jnp

    return scan(lambda h, x_t: (jnp.sin(h) + x_t, h), x[0], x[1:], reverse=True)[1]


def looped(fori_loop, x):
    return fori_loop(0, 3, lambda i, v: v * 0.5 + (v * v).sum() * 0.1, x)


def branched(cond, x):
    import jax.numpy as jnp

    # The predicate is constant near x (sum of x is well away from 0): one branch's derivative.
    return cond(x.sum() > 0, jnp.sin, jnp.cos, x)


def switched(switch, x):
    import jax.numpy as jnp

    return switch(1, (jnp.sin, jnp.tanh, jnp.exp), x)


def mapped(map_, x):
    import jax.numpy as jnp

    return map_(lambda row: jnp.sin(row) * row.sum(), x)


def associative(associative_scan, x):
    import jax.numpy as jnp

    return associative_scan(jnp.multiply, x)


def cube_root_by_newton(custom_root, x):
    """The root of y^3 - x, found by Newton's method; its derivative comes from the implicit function theorem."""
    def solve(g, y0):
        y = y0
        for _ in range(30):
            y = y - g(y) / (3 * y * y)
        return y

    return custom_root(lambda y: y ** 3 - x, x * 0 + 1.0, solve, lambda g, y: y / (3 * x ** (2 / 3)))


def linear_solve(custom_linear_solve, x, a):
    import jax.numpy as jnp

    def matvec(v):
        return a @ v

    def solve(mv, b):
        return jnp.linalg.solve(a, b)

    def transpose_solve(vecmat, b):
        return jnp.linalg.solve(a.T, b)

    return custom_linear_solve(matvec, x, solve, transpose_solve)


def conv(conv_general_dilated, x, w):
    return conv_general_dilated(x, w, window_strides=(1,), padding="VALID")


# lax.max and lax.add with Python-scalar identities: the windowed reductions jax differentiates (a
# reduce_window with any other computation, or a non-identity initial value, has no derivative).
def windowed_max(reduce_window, x):
    import jax

    return reduce_window(x, -float("inf"), jax.lax.max, (2,), (1,), "VALID")


def windowed_sum(reduce_window, x):
    import jax

    return reduce_window(x, 0.0, jax.lax.add, (3,), (1,), "VALID")


ROWS = (
    # elementwise primitives
    Row(X + "rsqrt", (5,), (0.3, 3), VJP),
    Row(X + "logistic", (), (-3, 3), ("derivative",)),
    Row(X + "integer_pow", (4,), (-2, 2), ("hvp",), kwargs={"y": 3}),
    Row(X + "erf_inv", (5,), (-0.8, 0.8), JVP),
    Row(X + "lgamma", (), (0.3, 4), ("second_derivative",)),
    Row(X + "digamma", (5,), (0.3, 4), VJP),
    Row(X + "igamma", (5,), (0.3, 3), JVP, call=lambda f, x, a: f(a, x), contexts=(((5,), (1, 3)),)),
    Row(X + "igammac", (5,), (0.3, 3), VJP, call=lambda f, x, a: f(a, x), contexts=(((5,), (1, 3)),)),
    Row(X + "atan2", (2, 4), signed(0.3, 2), JVP, call=lambda f, x: f(x[0], x[1])),
    # Constants as arrays of x's dtype: lax takes no mixed dtypes, and Python floats are float64 under x64.
    Row(X + "rem", (5,), (0.4, 0.6), VJP, call=lambda f, x: f(x * 3.0, x.dtype.type(1.0))),
    Row(X + "clamp", (6,), (-0.8, 0.8), JVP, call=lambda f, x: f(x.dtype.type(-1.0), x, x.dtype.type(1.0))),
    Row(X + "cbrt", (), signed(0.2, 2), ("derivative",)),
    Row(X + "tan", (5,), (-1.2, 1.2), VJP),
    Row(X + "expm1", (), (-2, 2), ("second_derivative",)),
    Row(X + "log1p", (5,), (-0.5, 2), JVP),
    Row(X + "exp2", (4,), (-2, 2), ("hessian",)),
    Row(X + "pow", (2, 4), (0.3, 2), VJP, call=lambda f, x: f(x[0], x[1])),
    Row(X + "square", (), (-2, 2), ("derivative",)),
    Row(X + "sqrt", (5,), (0.2, 3), JVP),
    Row(X + "bessel_i0e", (5,), signed(0.2, 2), VJP),
    Row(X + "bessel_i1e", (), signed(0.2, 2), ("second_derivative",)),
    Row(X + "betainc", (5,), (0.1, 0.9), JVP, call=lambda f, x, a, b: f(a, b, x),
        contexts=(((5,), (1, 3)), ((5,), (1, 3)))),
    # cumulative reductions and reductions
    Row(X + "cumsum", (6,), (-1, 1), JACOBIAN),
    Row(X + "cumsum", (6,), (-1, 1), VJP, label="reverse", kwargs={"reverse": True}),
    Row(X + "cumprod", (6,), signed(0.3, 1.5), JACOBIAN),
    Row(X + "cummax", (6,), spread(-2, 2), JVP),
    Row(X + "cummin", (6,), spread(-2, 2), VJP),
    Row(X + "cumlogsumexp", (6,), (-2, 2), JACOBIAN),
    Row(X + "reduce_max", (2, 4), spread(-2, 2), JVP, kwargs={"axes": (1,)}),
    Row(X + "reduce_sum", (2, 3), (-1, 1), ("gradient",), kwargs={"axes": (0, 1)}),
    Row(X + "reduce_prod", (4,), signed(0.3, 1.5), ("hvp",), kwargs={"axes": (0,)}),
    Row(X + "sort", (5,), spread(-2, 2), JACOBIAN),
    Row(X + "top_k", (6,), spread(-2, 2), VJP, call=lambda f, x: f(x, 2)[0]),
    # control flow
    Row(X + "scan", (5,), (-1, 1), JACOBIAN + ("gradient",), call=scanned),
    Row(X + "scan", (5,), (-1, 1), JVP, label="reverse", call=scanned_reverse),
    Row(X + "fori_loop", (4,), (-0.5, 0.5), VJP + ("hessian",), call=looped),
    Row(X + "cond", (5,), (0.2, 1), JVP + ("gradient",), call=branched),
    Row(X + "switch", (5,), (-1, 1), VJP, call=switched),
    Row(X + "map", (2, 3), (-1, 1), JVP, call=mapped),
    Row(X + "associative_scan", (5,), signed(0.3, 1.5), VJP, call=associative),
    Row(X + "select_n", (2, 4), (-1, 1), JVP, call=lambda f, x: f(x[0] > 10.0, x[0] * x[1], x[1] ** 2)),
    Row(X + "custom_root", (5,), (0.5, 2), VJP, call=cube_root_by_newton),
    Row(X + "custom_linear_solve", (3,), (-1, 1), JACOBIAN, call=linear_solve, contexts=(((3, 3), WELL),)),
    # windows, convolutions, contractions, indexing
    Row(X + "conv_general_dilated", (1, 2, 6), (-1, 1), JVP + ("gradient",), call=conv,
        contexts=(((3, 2, 3), (-1, 1)),)),
    Row(X + "conv_transpose", (1, 5, 2), (-1, 1), VJP,
        call=lambda f, x, w: f(x, w, strides=(2,), padding="VALID", dimension_numbers=("NWC", "WIO", "NWC")),
        contexts=(((2, 2, 3), (-1, 1)),)),
    Row(X + "reduce_window", (6,), spread(-2, 2), JVP, label="max", call=windowed_max),
    Row(X + "reduce_window", (6,), (-1, 1), VJP, label="sum", call=windowed_sum),
    Row(X + "dot_general", (2, 3), (-1, 1), JACOBIAN, call=lambda f, x, y: f(x, y, (((1,), (0,)), ((), ()))),
        contexts=(((3, 2), (-1, 1)),)),
    Row(X + "batch_matmul", (2, 2, 2), (-1, 1), JVP, call=lambda f, x: f(x, x)),
    Row(X + "pad", (5,), (-1, 1), VJP, call=lambda f, x: f(x, x.dtype.type(0.0), ((1, 2, 1),))),
    Row(X + "dynamic_slice", (6,), (-1, 1), JVP, call=lambda f, x: f(x, (2,), (3,))),
    Row(X + "dynamic_update_slice", (6,), (-1, 1), VJP, call=lambda f, x: f(x, x[:2] * x[3:5], (1,))),
    Row(X + "rev", (5,), (-1, 1), JVP, kwargs={"dimensions": (0,)}),
    # jax.lax.linalg
    Row(X + "linalg.cholesky", (3, 3), WELL, VJP, call=lambda f, x: f(x @ x.T)),
    Row(X + "linalg.triangular_solve", (3, 3), WELL, JVP,
        call=lambda f, x, b: f(x, b, left_side=True, lower=True), contexts=(((3, 2), (-1, 1)),)),
    Row(X + "linalg.qr", (3, 2), (-1, 1), VJP, call=lambda f, x: f(x, full_matrices=False)[1]),
    Row(X + "linalg.eigh", (3, 3), distinct_spectrum, JVP, call=lambda f, x: f(x + x.T)[1]),
    Row(X + "linalg.svd", (3, 3), distinct_spectrum, VJP, call=lambda f, x: f(x, compute_uv=False)),
    Row(X + "linalg.lu", (3, 3), WELL, JVP, call=lambda f, x: f(x)[0]),
)
