"""Jacobians and Hessians with a declared sparsity pattern: banded, stencil-shaped, arrowhead, block-diagonal.

Every cell fails on a nonzero outside the pattern (``Scenario(sparsity=...)``), and the opt-in sparse
backends (jax-sparse-asdex, jax-sparse-sparsejac) compute them from a detected or the declared pattern.
The small ones get a full reference, which also checks the declared pattern; the block-diagonal
Hessian (6 elements) is checked by probes.
"""
from __future__ import annotations

import numpy as np

from gradci.scenarios.authoring.namespace import namespace
from gradci.scenarios.authoring.scenario import Scenario
from gradci.scenarios.library._common import operator_tags, rng, scenario_name

FAMILY = "sparse"


def tridiagonal(x):
    """Each output reads its element and both neighbours (zero beyond the ends)."""
    xp = namespace(x)
    left = xp.concat([xp.zeros(1, dtype=x.dtype), x[:-1]])
    right = xp.concat([x[1:], xp.zeros(1, dtype=x.dtype)])
    return xp.sin(x) * (1.0 + left) + right ** 2


def row_stencil(x):
    """A matrix's rows smoothed by a two-point stencil: each entry reads itself and its right neighbour."""
    xp = namespace(x)
    right = xp.concat([x[:, 1:], xp.zeros((x.shape[0], 1), dtype=x.dtype)], axis=1)
    return xp.tanh(x) + x * right


def arrowhead(x):
    """x[0] couples with every element, the others only with themselves."""
    xp = namespace(x)
    return xp.sum(xp.cos(x)) + x[0] * xp.sum(x[1:] ** 2)


def paired(x):
    """Elements coupled in pairs (0, 1), (2, 3), ...: a block-diagonal Hessian of 2x2 blocks."""
    xp = namespace(x)
    return xp.sum(xp.exp(0.3 * x[0::2] * x[1::2])) + xp.sum(x ** 4) / 4


def band(n: int) -> np.ndarray:
    rows, cols = np.indices((n, n))
    return np.abs(rows - cols) <= 1


def stencil_pattern(shape: tuple[int, int]) -> np.ndarray:
    """Shaped like the Jacobian, shape + shape: output (i, j) reads inputs (i, j) and (i, j + 1)."""
    pattern = np.zeros(shape * 2, dtype=bool)
    for i, j in np.ndindex(shape):
        pattern[i, j, i, j] = True
        if j + 1 < shape[1]:
            pattern[i, j, i, j + 1] = True
    return pattern


def arrow(n: int) -> np.ndarray:
    pattern = np.eye(n, dtype=bool)
    pattern[0, :] = pattern[:, 0] = True
    return pattern


def pairs(n: int) -> np.ndarray:
    blocks = np.arange(n) // 2
    return blocks[:, None] == blocks[None, :]


def scenarios() -> list[Scenario]:
    matrix = rng("sparse/row-stencil").uniform(-1.0, 1.0, (3, 4))
    table = [
        ("tridiagonal", "jacobian", tridiagonal, rng("sparse/tridiagonal").uniform(-1.0, 1.0, 8), band(8)),
        ("row-stencil", "jacobian", row_stencil, matrix, stencil_pattern((3, 4))),
        ("arrowhead", "hessian", arrowhead, rng("sparse/arrowhead").uniform(-1.0, 1.0, 4), arrow(4)),
        ("block-diagonal", "hessian", paired, rng("sparse/block-diagonal").uniform(-1.0, 1.0, 6), pairs(6)),
    ]
    return [Scenario(name=scenario_name(FAMILY, what, op), operator=op, f=fn, x=x, sparsity=pattern,
                     tags=(FAMILY, "sparsity") + operator_tags(op))
            for what, op, fn, x, pattern in table]
