"""torch.special: error functions, gamma family, Bessel functions, logits and entropies."""
from __future__ import annotations

from ._table import FIRST, FULL, JACOBIAN, JVP, SCALAR, SECOND, TORCH_FORWARD, VJP, Row, lacks, on_every, signed

AREA = "torch.special"
S = "torch.special."

# torch registers these three as non-differentiable: every derivative comes back silently zero.
BESSEL_ZERO = {"torch-*": "upstream: https://github.com/pytorch/pytorch/pull/189872 torch.special's Bessel J "
                    "functions are `non_differentiable` in derivatives.yaml: gradients are silently zero"}


ROWS = (
    Row(S + "erf", (), (-2, 2), SCALAR),
    Row(S + "erfc", (5,), (-2, 2), FULL),
    Row(S + "erfinv", (), (-0.8, 0.8), SCALAR),
    Row(S + "erfinv", (4,), (-0.8, 0.8), SECOND, label="vector"),
    Row(S + "erfcx", (5,), (-1, 2), VJP),
    Row(S + "expit", (), (-3, 3), SCALAR),
    Row(S + "logit", (5,), (0.1, 0.9), FULL),
    Row(S + "exp2", (), (-2, 2), SCALAR),
    Row(S + "expm1", (5,), (-2, 2), JVP),
    Row(S + "log1p", (), (-0.5, 2), SCALAR),
    Row(S + "gammaln", (5,), (0.3, 4), FULL),
    Row(S + "digamma", (), (0.3, 4), SCALAR),
    Row(S + "psi", (4,), (0.3, 4), SECOND),
    Row(S + "polygamma", (5,), (0.5, 3), VJP, call=lambda f, x: f(1, x)),
    Row(S + "polygamma", (), (0.5, 3), SCALAR, label="2", call=lambda f, x: f(2, x)),
    Row(S + "multigammaln", (4,), (1.5, 4), JVP, kwargs={"p": 2}),
    Row(S + "i0", (), (-2, 2), SCALAR),
    Row(S + "i0e", (5,), signed(0.2, 2), VJP),
    Row(S + "i1", (), (-2, 2), SCALAR),
    Row(S + "i1e", (5,), signed(0.2, 2), JVP),
    Row(S + "ndtr", (), (-2, 2), SCALAR),
    Row(S + "ndtri", (5,), (0.1, 0.9), VJP),
    Row(S + "log_ndtr", (), (-3, 3), SCALAR),
    Row(S + "log_ndtr", (4,), (-3, 3), SECOND, label="vector"),
    Row(S + "sinc", (5,), signed(0.2, 2), JVP),
    Row(S + "entr", (5,), (0.1, 2), FULL),
    Row(S + "xlogy", (2, 4), (0.2, 2), VJP, call=lambda f, x: f(x[0], x[1])),
    Row(S + "xlog1py", (2, 4), (0.2, 2), JVP, call=lambda f, x: f(x[0], x[1])),
    Row(S + "zeta", (5,), (1.5, 4), VJP, call=lambda f, q, s: f(s, q), contexts=(((5,), (1.5, 3)),),
        skip=lacks(TORCH_FORWARD, "forward-mode derivative of special_zeta")),
    Row(S + "gammainc", (5,), (0.3, 3), JVP, call=lambda f, x, a: f(a, x), contexts=(((5,), (1, 3)),),
        skip=lacks(TORCH_FORWARD, "forward-mode derivative of igamma")),
    Row(S + "gammaincc", (5,), (0.3, 3), VJP, call=lambda f, x, a: f(a, x), contexts=(((5,), (1, 3)),),
        skip=lacks(TORCH_FORWARD, "forward-mode derivative of igammac")),
    Row(S + "logsumexp", (2, 3), (-2, 2), JACOBIAN, kwargs={"dim": 1}),
    Row(S + "softmax", (4,), (-2, 2), SECOND, kwargs={"dim": 0}),
    Row(S + "log_softmax", (2, 3), (-2, 2), FULL, kwargs={"dim": 1}),
    Row(S + "round", (5,), signed(0.2, 2), JVP, call=lambda f, x: f(x * 0.3) + x),
    Row(S + "spherical_bessel_j0", (5,), (0.3, 3), FIRST, xfail=on_every(FIRST, BESSEL_ZERO)),
    Row(S + "bessel_j0", (5,), (0.3, 3), FIRST, xfail=on_every(FIRST, BESSEL_ZERO)),
    Row(S + "bessel_j1", (5,), (0.3, 3), FIRST, xfail=on_every(FIRST, BESSEL_ZERO)),
)
