"""Derivative rules handed to jax.lax's solvers: what a call of custom_linear_solve or custom_root makes.

``solve_linear`` hands ``custom_linear_solve`` a ``solve`` (the value, and tangents in forward mode) and a
``transpose_solve`` (cotangents in reverse mode only), ``solve_linear_jit`` is it under a module-level
``jax.jit`` (which keeps its trace); ``solve_unused`` does the same and no scenario calls it;
``cube_root`` hands ``custom_root`` its ``tangent_solve``. (tests/engine/rules/test_solver_rules.py)
"""
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

# Not symmetric: a transpose_solve that solved with A instead of A.T would be wrong.
A = np.array([[4.0, 1.0, 0.5], [-1.0, 3.0, 1.0], [0.3, -0.8, 5.0]])


def solve_linear(b):
    a = jnp.asarray(A, dtype=b.dtype)

    def matvec(v):
        return a @ v

    def solve(matvec, rhs):
        return jnp.linalg.solve(a, rhs)

    def transpose_solve(vecmat, rhs):
        return jnp.linalg.solve(a.T, rhs)

    return jax.lax.custom_linear_solve(matvec, b, solve, transpose_solve)


solve_linear_jit = jax.jit(solve_linear)


def _solve_by_hand(a, matvec, rhs):
    return jnp.linalg.solve(a, rhs)


def solve_unused(b):
    a = jnp.asarray(A, dtype=b.dtype)
    return lax.custom_linear_solve(lambda v: a @ v, b, solve=functools.partial(_solve_by_hand, a),
                                   transpose_solve=lambda vecmat, rhs: jnp.linalg.solve(a.T, rhs))


def cube_root(x):
    """The root of y³ - x by Newton's method; its derivative by the implicit function theorem."""
    def solve(f, y0):
        y = y0
        for _ in range(30):
            y = y - f(y) / (3 * y * y)
        return y

    def tangent_solve(g, y):
        return y / g(jnp.ones_like(y))  # f is elementwise: its linearization is a diagonal

    return lax.custom_root(lambda y: y ** 3 - x, jnp.ones_like(x), solve, tangent_solve)
