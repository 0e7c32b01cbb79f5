"""Array-API helpers for scenario authors: one function body runs in numpy, torch and jax."""
from __future__ import annotations

from typing import Any

import array_api_compat
import optree


def namespace(*trees: Any):
    """The array-API namespace of the arrays in ``trees`` (pytrees allowed)."""
    leaves = [leaf for tree in trees for leaf in optree.tree_leaves(tree, none_is_leaf=True)
              if array_api_compat.is_array_api_obj(leaf)]
    return array_api_compat.array_namespace(*leaves)
