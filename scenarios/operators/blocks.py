"""The block convention of matrix results (Jacobians, Hessians) for pytrees, as ``jax.jacrev`` has it.

For x a pytree and f(x) a pytree, the Jacobian is a pytree shaped like f(x) whose leaves are pytrees
shaped like x: block [y_i][x_j] has shape ``y_i.shape + x_j.shape``. The Hessian is x-structure over
x-structure, block [x_i][x_j] of shape ``x_i.shape + x_j.shape``. A single array x (and f(x)) is one
block: the result is the array of shape ``f(x).shape + x.shape``.

The finite-difference reference and the probes work on the matrix of the flattened pytrees (rows:
the rows' leaves raveled in order, columns: x's); these two functions go between it and the blocks.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import optree


def _leaves(tree: Any) -> list:
    return optree.tree_leaves(tree, none_is_leaf=True)


def _splits(leaves: list) -> list[int]:
    return list(np.cumsum([np.size(leaf) for leaf in leaves])[:-1])


def matrix_blocks(matrix: np.ndarray, rows_like: Any, columns_like: Any) -> Any:
    """The (rows, columns) matrix as blocks: a pytree like ``rows_like`` of pytrees like ``columns_like``."""
    row_leaves, row_spec = optree.tree_flatten(rows_like, none_is_leaf=True)
    column_leaves, column_spec = optree.tree_flatten(columns_like, none_is_leaf=True)

    def row_blocks(band: np.ndarray, row: Any) -> Any:
        parts = np.split(band, _splits(column_leaves), axis=1)
        return optree.tree_unflatten(column_spec, [part.reshape(np.shape(row) + np.shape(column))
                                                   for part, column in zip(parts, column_leaves)])

    bands = np.split(np.asarray(matrix), _splits(row_leaves), axis=0)
    return optree.tree_unflatten(row_spec, [row_blocks(band, row) for band, row in zip(bands, row_leaves)])


def block_matrix(blocks: Any, columns_like: Any) -> np.ndarray:
    """The blocks as one float64 (rows, columns) matrix.

    The rows' shapes are read off the blocks, whose trailing dimensions are x's. A ValueError says where
    the blocks do not fit x.
    """
    columns = [np.shape(leaf) for leaf in _leaves(columns_like)]
    leaves = [np.asarray(leaf, dtype=np.float64) for leaf in _leaves(blocks)]
    if len(leaves) % len(columns):
        raise ValueError(f"{len(leaves)} blocks do not make rows of x's {len(columns)} leaves")
    bands = []
    for start in range(0, len(leaves), len(columns)):
        row = leaves[start:start + len(columns)]
        row_shapes = {block.shape[:block.ndim - len(shape)] for block, shape in zip(row, columns)}
        fits = all(block.shape[block.ndim - len(shape):] == shape for block, shape in zip(row, columns))
        if not fits or len(row_shapes) != 1:
            raise ValueError(f"blocks of shapes {[block.shape for block in row]} do not end in x's leaf shapes "
                             f"{columns} after one common row shape")
        size = int(np.prod(row_shapes.pop()))
        bands.append(np.concatenate([block.reshape(size, int(np.prod(shape))) for block, shape in zip(row, columns)],
                                     axis=1))
    return np.concatenate(bands, axis=0) if bands else np.zeros((0, sum(int(np.prod(s)) for s in columns)))
