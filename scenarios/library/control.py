"""Control flow: selection, fixed-trip loops, scans, conditionals and permutations.

Where jax needs its structured primitive to trace a loop or branch (lax.scan, lax.fori_loop,
lax.cond), the jax implementation uses it and torch and numpy run the plain Python equivalent:
that is how each framework's users write it, and the primitives have derivative rules of their own.
Input points stay away from the switching surfaces, where the functions are not differentiable.
"""
from __future__ import annotations

import numpy as np

from gradci.scenarios.authoring.namespace import namespace
from gradci.scenarios.authoring.scenario import Scenario
from gradci.scenarios.library._common import operator_tags, rng, scenario_name

FAMILY = "control-flow"
STEPS = 6


def piecewise(x):
    xp = namespace(x)
    return xp.where(x > 0, x ** 2 * xp.exp(-x), xp.sin(x))


def piecewise_sum(x):
    return namespace(x).sum(piecewise(x) * x)


def damped_iteration(x, c):
    # A contraction in y for |x| < 1: y converges towards the fixed point y = tanh(x y + c).
    xp = namespace(x)
    y = xp.zeros_like(x)
    for _ in range(STEPS):
        y = 0.5 * y + 0.5 * xp.tanh(x * y + c)
    return y


def damped_iteration_sum(x, c):
    return namespace(x).sum(damped_iteration(x, c) ** 2)


def recurrence_loop(x, w):
    """h_t = tanh(W h_{t-1} + x_t), unrolled in Python; returns every h_t."""
    xp = namespace(x)
    h = xp.zeros_like(x[0])
    hs = []
    for t in range(x.shape[0]):
        h = xp.tanh(w @ h + x[t])
        hs.append(h)
    return xp.stack(hs)


def recurrence_scan(x, w):
    import jax
    import jax.numpy as jnp

    def step(h, x_t):
        h = jnp.tanh(w @ h + x_t)
        return h, h

    return jax.lax.scan(step, jnp.zeros_like(x[0]), x)[1]


def recurrence_loss_loop(x, w):
    return namespace(x).sum(recurrence_loop(x, w) ** 2)


def recurrence_loss_scan(x, w):
    import jax.numpy as jnp

    return jnp.sum(recurrence_scan(x, w) ** 2)


def power_loop(x, a):
    """Normalised power iteration from x, a fixed number of times; returns a Rayleigh-quotient-like energy."""
    xp = namespace(x)
    v = x
    for _ in range(STEPS):
        v = a @ v / xp.sqrt(1 + xp.sum(v ** 2))
    return xp.sum(v * (a @ v))


def power_fori(x, a):
    import jax
    import jax.numpy as jnp

    v = jax.lax.fori_loop(0, STEPS, lambda i, v: a @ v / jnp.sqrt(1 + jnp.sum(v ** 2)), x)
    return jnp.sum(v * (a @ v))


def branch_python(x):
    xp = namespace(x)
    if xp.sum(x) > 0:
        return xp.sum(xp.sin(x) * x)
    return xp.sum(xp.exp(x))


def branch_where(x):
    # torch.func's vmap-based transforms cannot follow a Python `if` on data: select instead.
    xp = namespace(x)
    return xp.where(xp.sum(x) > 0, xp.sum(xp.sin(x) * x), xp.sum(xp.exp(x)))


def branch_cond(x):
    import jax
    import jax.numpy as jnp

    return jax.lax.cond(jnp.sum(x) > 0, lambda v: jnp.sum(jnp.sin(v) * v), lambda v: jnp.sum(jnp.exp(v)), x)


def sorted_weighted(x, w):
    xp = namespace(x)
    return xp.sum(xp.sort(x) * w)


def cumulative(x):
    xp = namespace(x)
    return xp.cumulative_sum(xp.sin(x) * x, axis=0)


def _draws():
    g = rng(FAMILY)
    away = g.choice([-1.0, 1.0], size=5) * g.uniform(0.3, 1.5, size=5)
    distinct = np.linspace(-1.5, 1.5, 6)[g.permutation(6)]
    return {
        "away-from-zero": away,
        "small": g.uniform(-0.8, 0.8, size=4),
        "offset": g.normal(size=4),
        "sequence": g.normal(size=(5, 3)),
        "recurrent-weights": 0.5 * g.normal(size=(3, 3)),
        "start": g.normal(size=3),
        "matrix": g.normal(size=(3, 3)) * 0.7,
        "positive-sum": np.abs(g.normal(size=4)) + 0.2,
        "distinct": distinct,
        "sort-weights": g.normal(size=6),
    }


def scenarios() -> list[Scenario]:
    d = _draws()
    recurrence = {"numpy": recurrence_loss_loop, "torch": recurrence_loss_loop, "jax": recurrence_loss_scan}
    recurrence_states = {"numpy": recurrence_loop, "torch": recurrence_loop, "jax": recurrence_scan}
    power = {"numpy": power_loop, "torch": power_loop, "jax": power_fori}
    branch = {"numpy": branch_python, "torch": branch_where, "jax": branch_cond}
    # (what, function, x, contexts, operators, extra tags)
    table = [
        ("where", piecewise, d["away-from-zero"], (), ("jacobian", "jvp", "vjp"), ("where",)),
        ("where-sum", piecewise_sum, d["away-from-zero"], (), ("gradient", "hvp"), ("where",)),
        ("fixed-loop", damped_iteration, d["small"], (d["offset"],), ("jacobian", "jvp", "vjp"), ("loop",)),
        ("fixed-loop-sum", damped_iteration_sum, d["small"], (d["offset"],), ("gradient",), ("loop",)),
        ("scan", recurrence, d["sequence"], (d["recurrent-weights"],), ("gradient", "hvp"), ("scan",)),
        ("scan-states", recurrence_states, d["sequence"], (d["recurrent-weights"],), ("jvp", "vjp"), ("scan",)),
        ("fori-loop", power, d["start"], (d["matrix"],), ("gradient", "jvp"), ("loop",)),
        ("cond", branch, d["positive-sum"], (), ("gradient", "jvp"), ("cond",)),
        ("sort", sorted_weighted, d["distinct"], (d["sort-weights"],), ("gradient", "jvp"), ("sort",)),
        ("cumulative-sum", cumulative, d["offset"], (), ("jacobian", "vjp"), ()),
    ]
    out = []
    for what, fn, x, contexts, operators, extra in table:
        tags = (FAMILY,) + extra + (("contexts",) if contexts else ())
        tags += ("per-framework",) if isinstance(fn, dict) else ()
        out += [Scenario(name=scenario_name(FAMILY, what, op), operator=op, x=x, contexts=contexts,
                         f=fn,  # type: ignore[arg-type]  # the table's rows are tuples of mixed types
                         tags=tags + operator_tags(op))
                for op in operators]
    return out
