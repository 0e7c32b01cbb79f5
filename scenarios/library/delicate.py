"""Numerically delicate points: large magnitudes, tiny inputs, and the where-trick at exactly zero.

The where-trick ``where(x == 0, 1, sin(x)/x)`` is correct in value and has a perfectly good
derivative at 0, yet reverse mode returns NaN there in torch and jax alike: the cotangent of the
branch not taken is 0, multiplied by the NaN partial of sin(x)/x at 0. Forward mode selects the
tangent instead and is fine. The scenarios declare that as an expected failure for reverse-mode
backends, and carry the safe double-where form next to it, which passes at first order everywhere.
At second order neither form is right at 0: AD differentiates the branch selected there, the
constant 1, and reports a second derivative of 0 where sinc has -1/3. Declared too: a checker must
say so rather than hide it.
"""
from __future__ import annotations

import numpy as np

from gradci.scenarios.authoring.namespace import namespace
from gradci.scenarios.authoring.scenario import Scenario
from gradci.scenarios.library._common import operator_tags, rng, scenario_name

FAMILY = "delicate"
REVERSE_NAN = {"*-rev*": "where-trick: the untaken branch's NaN partial times a zero cotangent is NaN"}
CONSTANT_BRANCH = "where-trick at 0: AD differentiates the selected constant, second derivative 0 instead of -1/3"
# Every automatic backend; finite differences see the function, not its branches.
SECOND_ORDER_WRONG = {"jax-*": CONSTANT_BRANCH, "torch-*": CONSTANT_BRANCH}


def sinc_where(x):
    xp = namespace(x)
    return xp.sum(xp.where(x == 0, xp.ones_like(x), xp.sin(x) / x))


def sinc_double_where(x):
    xp = namespace(x)
    safe = xp.where(x == 0, xp.ones_like(x), x)
    return xp.sum(xp.where(x == 0, xp.ones_like(x), xp.sin(safe) / safe))


def versine_where(x):
    xp = namespace(x)
    return xp.sum(xp.where(x == 0, 0.5 * xp.ones_like(x), (1 - xp.cos(x)) / x ** 2) * x)


def versine_double_where(x):
    xp = namespace(x)
    safe = xp.where(x == 0, xp.ones_like(x), x)
    return xp.sum(xp.where(x == 0, 0.5 * xp.ones_like(x), (1 - xp.cos(safe)) / safe ** 2) * x)


def log_sqrt(x):
    xp = namespace(x)
    return xp.sum(xp.log(x) + xp.sqrt(x))


def logsumexp(x):
    # The stable form: shifting by the max keeps exp from overflowing at x ~ 1e3.
    xp = namespace(x)
    m = xp.max(x)
    return m + xp.log(xp.sum(xp.exp(x - m)))


def softplus(x):
    xp = namespace(x)
    return xp.sum(xp.logaddexp(xp.zeros_like(x), x))


def cubic(x):
    xp = namespace(x)
    return xp.sum(x ** 3) / 3


def exponential(x):
    xp = namespace(x)
    return xp.exp(x)


def normalize(x):
    xp = namespace(x)
    return x / xp.linalg.vector_norm(x)


def sine(x):
    xp = namespace(x)
    return xp.sum(xp.sin(x) * (1 + x))


def expm1_log1p(x):
    xp = namespace(x)
    return xp.sum(xp.expm1(x) + xp.log1p(x))


def sqrt_tiny(x):
    xp = namespace(x)
    return xp.sum(xp.sqrt(x))


def log_tiny(x):
    xp = namespace(x)
    return xp.sum(xp.log(x))


def sinc_hvp(x, v):
    # Exact: at the zero the Hessian's diagonal is the series' -1/3, which every stencil straddling
    # the where-trick resolves only to about 1e-8, short of float64's tolerance for the batched
    # tangents; near 0 the series, elsewhere sinc'' = -sin x/x - 2 cos x/x² + 2 sin x/x³.
    small = np.abs(x) < 1e-3
    safe = np.where(small, 1.0, x)
    exact = -np.sin(safe) / safe - 2 * np.cos(safe) / safe ** 2 + 2 * np.sin(safe) / safe ** 3
    return np.where(small, -1 / 3 + x ** 2 / 10, exact) * v


def log_tiny_hvp(x, v):
    # Exact: at x ~ 1e-6 the Hessian -1/x² is ~1e12 and no finite-difference step resolves it to
    # float64 tolerance (the reference's own error estimate says so), so the library gives it.
    return -v / x ** 2


def _draws():
    g = rng(FAMILY)
    return {
        "with-zero": np.array([0.0, 0.5, -1.2, 2.0]),
        "large": 10.0 ** g.uniform(3, 5, size=4),
        "around-1e3": 1e3 + g.normal(size=5),
        "huge-both-signs": np.array([-800.0, -60.0, 45.0, 700.0]),
        "around-60": 60.0 + 10 * g.uniform(-1, 1, size=3),
        "e4": 1e4 * g.normal(size=4),
        "tiny": 1e-8 * g.normal(size=4),
        "tiny-positive": 10.0 ** g.uniform(-7, -5, size=4),
    }


def scenarios() -> list[Scenario]:
    d = _draws()
    trick_ops = ("gradient", "jvp", "hvp")
    analytic = {("log-tiny", "hvp"): log_tiny_hvp, ("sinc-where", "hvp"): sinc_hvp,
                ("sinc-double-where", "hvp"): sinc_hvp}
    # (what, function, x, operators, xfail per operator, extra tags)
    table = [
        ("sinc-where", sinc_where, d["with-zero"], trick_ops,
         {"gradient": REVERSE_NAN, "hvp": {**REVERSE_NAN, **SECOND_ORDER_WRONG}}, ("where-trick",)),
        ("sinc-double-where", sinc_double_where, d["with-zero"], trick_ops, {"hvp": SECOND_ORDER_WRONG},
         ("where-trick", "safe")),
        ("versine-where", versine_where, d["with-zero"], ("gradient",), {"gradient": REVERSE_NAN}, ("where-trick",)),
        ("versine-double-where", versine_double_where, d["with-zero"], ("gradient",), {}, ("where-trick", "safe")),
        ("log-sqrt-large", log_sqrt, d["large"], ("gradient", "hvp"), {}, ("large-magnitude",)),
        ("logsumexp-large", logsumexp, d["around-1e3"], ("gradient", "hvp"), {}, ("large-magnitude",)),
        ("softplus-large", softplus, d["huge-both-signs"], ("gradient",), {}, ("large-magnitude",)),
        ("cubic-large", cubic, d["around-1e3"], ("gradient", "hvp"), {}, ("large-magnitude",)),
        ("exp-large", exponential, d["around-60"], ("jacobian", "vjp"), {}, ("large-magnitude",)),
        ("normalize-large", normalize, d["e4"], ("jacobian", "jvp"), {}, ("large-magnitude",)),
        ("sin-tiny", sine, d["tiny"], ("gradient", "hvp"), {}, ("near-zero",)),
        ("expm1-log1p-tiny", expm1_log1p, d["tiny"], ("gradient",), {}, ("near-zero",)),
        ("sqrt-tiny", sqrt_tiny, d["tiny-positive"], ("gradient",), {}, ("near-zero",)),
        ("log-tiny", log_tiny, d["tiny-positive"], ("gradient", "hvp"), {}, ("near-zero",)),
    ]
    out = []
    for what, fn, x, operators, xfails, extra in table:
        out += [Scenario(name=scenario_name(FAMILY, what, op), operator=op, f=fn, x=x,
                         xfail=dict(xfails.get(op, {})), tags=(FAMILY,) + extra + operator_tags(op),
                         reference=analytic.get((what, op)))
                for op in operators]
    return out
