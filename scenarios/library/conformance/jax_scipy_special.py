"""jax.scipy.special: error functions, gamma and beta families, Bessel functions, entropies."""
from __future__ import annotations

from ._table import JACOBIAN, JVP, VJP, Row, signed

AREA = "jax.scipy.special"
S = "jax.scipy.special."


ROWS = (
    Row(S + "erf", (), (-2, 2), ("derivative",)),
    Row(S + "erfc", (5,), (-2, 2), JACOBIAN),
    Row(S + "erfinv", (4,), (-0.8, 0.8), ("hvp",)),
    Row(S + "erfcx", (5,), (-1, 2), VJP),
    Row(S + "expit", (), (-3, 3), ("second_derivative",)),
    Row(S + "logit", (5,), (0.1, 0.9), JACOBIAN),
    Row(S + "gammaln", (5,), (0.3, 4), JVP),
    Row(S + "loggamma", (), (0.3, 4), ("derivative",)),
    Row(S + "gamma", (4,), (0.3, 3), ("hessian",)),
    Row(S + "digamma", (), (0.3, 4), ("second_derivative",)),
    Row(S + "polygamma", (5,), (0.5, 3), VJP, call=lambda f, x: f(1, x)),
    Row(S + "multigammaln", (4,), (1.5, 4), JVP, kwargs={"d": 2}),
    Row(S + "i0", (), (-2, 2), ("derivative",)),
    Row(S + "i0e", (5,), signed(0.2, 2), VJP),
    Row(S + "i1", (5,), (-2, 2), JVP),
    Row(S + "i1e", (), signed(0.2, 2), ("second_derivative",)),
    Row(S + "ndtr", (5,), (-2, 2), VJP),
    Row(S + "ndtri", (), (0.1, 0.9), ("derivative",)),
    Row(S + "log_ndtr", (4,), (-1.5, 1.5), ("hvp",)),
    Row(S + "entr", (5,), (0.1, 2), JVP),
    Row(S + "xlogy", (2, 4), (0.2, 2), VJP, call=lambda f, x: f(x[0], x[1])),
    Row(S + "xlog1py", (2, 4), (0.2, 2), JVP, call=lambda f, x: f(x[0], x[1])),
    Row(S + "zeta", (5,), (1.5, 4), VJP, call=lambda f, q, s: f(s, q), contexts=(((5,), (1.5, 3)),)),
    Row(S + "gammainc", (5,), (0.3, 3), JVP, call=lambda f, x, a: f(a, x), contexts=(((5,), (1, 3)),)),
    Row(S + "gammaincc", (5,), (0.3, 3), VJP, call=lambda f, x, a: f(a, x), contexts=(((5,), (1, 3)),)),
    Row(S + "betainc", (5,), (0.1, 0.9), JVP, call=lambda f, x, a, b: f(a, b, x),
        contexts=(((5,), (1, 3)), ((5,), (1, 3)))),
    Row(S + "betaln", (2, 4), (0.5, 3), VJP, call=lambda f, x: f(x[0], x[1])),
    Row(S + "beta", (2, 4), (0.5, 3), JVP, call=lambda f, x: f(x[0], x[1])),
    Row(S + "poch", (5,), (0.5, 3), VJP, call=lambda f, x, m: f(x, m), contexts=(((5,), (0.5, 2)),)),
    Row(S + "hyp1f1", (5,), (-1, 1), JVP, call=lambda f, x: f(0.5, 1.5, x)),
    Row(S + "expi", (5,), (0.3, 2), VJP),
    Row(S + "exp1", (), (0.3, 2), ("second_derivative",),
        xfail={"second_derivative": {"jax-*": "upstream: not yet filed (related: "
                                              "https://github.com/jax-ml/jax/issues/26972, tracers in expn) "
                                              "a second derivative of exp1 raises TypeError"}}),
    # Reverse mode is NaN for x > 1 (forward mode is right): a NaN from a branch jnp.where discards.
    Row(S + "spence", (5,), (0.3, 2), VJP,
        xfail={"vjp": {"jax-rev*": "upstream: https://github.com/jax-ml/jax/pull/40709 (keeps spence's "
                                   "inactive branches finite for autodiff) spence's reverse-mode derivative is "
                                   "NaN for x > 1"}}),
    Row(S + "dawsn", (5,), (-2, 2), VJP),
    Row(S + "fresnel", (5,), (0.2, 2), JVP, call=lambda f, x: f(x)[0]),
    Row(S + "sici", (5,), (0.2, 2), VJP, call=lambda f, x: f(x)[0]),
    Row(S + "owens_t", (5,), (-2, 2), JVP, call=lambda f, x: f(x, 0.7)),
    Row(S + "kl_div", (2, 4), (0.2, 2), ("gradient",), call=lambda f, x: f(x[0], x[1])),
    Row(S + "rel_entr", (2, 4), (0.2, 2), VJP, call=lambda f, x: f(x[0], x[1])),
    Row(S + "logsumexp", (2, 3), (-2, 2), JACOBIAN, kwargs={"axis": 1}),
    Row(S + "softmax", (4,), (-2, 2), ("hessian",)),
    Row(S + "log_softmax", (2, 3), (-2, 2), JVP, kwargs={"axis": 1}),
    Row(S + "boxcox", (5,), (0.3, 3), VJP, call=lambda f, x: f(x, 0.5)),
    Row(S + "boxcox1p", (5,), (0.3, 3), JVP, call=lambda f, x: f(x, 0.5)),
    Row(S + "bessel_jn", (5,), (0.3, 3), VJP, call=lambda f, x: f(x, v=1)[1],
        xfail={"vjp": {("jax-*", "*", "float32"): "upstream: https://github.com/jax-ml/jax/issues/12402 bessel_jn is "
                                                  "numerically unstable: NaN values (and derivatives) in float32"}}),
)
