"""Complex x: the complex elementary functions torch and jax both offer, and real losses of complex z.

Each function is written once against the array-API namespace, so numpy computes the reference (over
(Re z, Im z), ``gradci.scenarios.numerics.complex_parts``) and every torch and jax backend is held to it in
its own convention (``gradci.scenarios.numerics.complex_conventions``). Tagged with the family, "complex",
and what kind of function it is: "holomorphic", "non-holomorphic" (complex to complex) or
"real-valued" (complex to real), so that ``gradci check --tag holomorphic`` picks one kind.

Points are drawn with Re z in [0.3, 1.2] and Im z in [-1, 1]: right of the branch cut of log, sqrt and
angle on the negative real axis, away from the poles of tanh (Im z = ±π/2) and 1/z, and from the kink
of |z| at 0.
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np

from gradci.scenarios.authoring.namespace import namespace
from gradci.scenarios.authoring.scenario import Scenario
from gradci.scenarios.library._common import derived, rng, scenario_name

FAMILY = "complex"

FIRST = ("jvp", "vjp")                   # both derivative rules, with complex (co)tangents
WITH_JACOBIAN = ("jacobian", *FIRST)     # and the Jacobian, which torch.func builds over (Re z, Im z)
LOSS = ("gradient", "value_and_gradient")


def _draw(g: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return g.uniform(0.3, 1.2, size=shape) + 1j * g.uniform(-1.0, 1.0, size=shape)


def _namespace_function(name: str) -> Callable:
    return lambda xp, z: getattr(xp, name)(z)


# (what, elementwise function of (xp, z), kind, operators)
HOLOMORPHIC = [
    *((name, _namespace_function(name), FIRST) for name in ("exp", "log", "sin", "cos", "tanh", "sqrt")),
    ("reciprocal", lambda xp, z: 1 / z, FIRST),
    ("square", lambda xp, z: xp.square(z), WITH_JACOBIAN),
]
NON_HOLOMORPHIC = [
    ("conj", lambda xp, z: xp.conj(z), WITH_JACOBIAN),
    ("times-modulus", lambda xp, z: z * xp.abs(z), FIRST),
]
REAL_VALUED = [
    ("abs", lambda xp, z: xp.abs(z), WITH_JACOBIAN),
    ("real", lambda xp, z: xp.real(z), FIRST),
    ("imag", lambda xp, z: xp.imag(z), FIRST),
    ("angle", lambda xp, z: xp.atan2(xp.imag(z), xp.real(z)), FIRST),
]
ELEMENTWISE = {"holomorphic": HOLOMORPHIC, "non-holomorphic": NON_HOLOMORPHIC, "real-valued": REAL_VALUED}


def _elementwise(fn: Callable) -> Callable:
    def elementwise(z):
        return fn(namespace(z), z)

    return derived(elementwise, fn)


def matrix_product(z):
    """z @ z for a square complex matrix: holomorphic, every entry depending on a row and a column."""
    return z @ z


def squared_modulus(z):
    """Σ|z|², the loss whose gradient is 2z in torch's convention and 2·conj(z) in jax's."""
    xp = namespace(z)
    return xp.sum(xp.real(z) ** 2 + xp.imag(z) ** 2)


def modulus_sum(z):
    xp = namespace(z)
    return xp.sum(xp.abs(z))


def holomorphic_then_modulus(z):
    """|Σ exp(z)·z|²: a real loss through holomorphic functions, as a complex model's loss is."""
    xp = namespace(z)
    s = xp.sum(xp.exp(z) * z)
    return xp.real(s) ** 2 + xp.imag(s) ** 2


def complex_times_real(x):
    """Σ|z·r|² over a pytree with a complex leaf z and a real leaf r: only z is taken apart into pairs."""
    xp = namespace(x["z"])
    w = x["z"] * x["r"]
    return xp.sum(xp.real(w) ** 2 + xp.imag(w) ** 2)


def _elementwise_scenarios() -> list[Scenario]:
    out = []
    for kind, rows in ELEMENTWISE.items():
        for what, fn, operators in rows:
            z = _draw(rng(f"{FAMILY}/{what}"), (3,))
            out += [Scenario(name=scenario_name(FAMILY, what, op), operator=op, f=_elementwise(fn), x=z,
                             tags=(FAMILY, kind)) for op in operators]
    return out


def _other_scenarios() -> list[Scenario]:
    g = rng(f"{FAMILY}/others")
    matrix = _draw(g, (2, 2))
    out = [Scenario(name=scenario_name(FAMILY, "matrix-product", op), operator=op, f=matrix_product, x=matrix,
                    tags=(FAMILY, "holomorphic")) for op in WITH_JACOBIAN]
    losses = [("squared-modulus", squared_modulus, _draw(g, (3,))), ("modulus-sum", modulus_sum, _draw(g, (3,))),
              ("holomorphic-then-modulus", holomorphic_then_modulus, _draw(g, (3,))),
              ("complex-times-real", complex_times_real, {"z": _draw(g, (3,)), "r": g.uniform(0.5, 1.5, size=3)})]
    out += [Scenario(name=scenario_name(FAMILY, what, op), operator=op, f=fn, x=x, tags=(FAMILY, "real-valued", "loss"))
            for what, fn, x in losses for op in LOSS]
    return out


def scenarios() -> list[Scenario]:
    return _elementwise_scenarios() + _other_scenarios()
