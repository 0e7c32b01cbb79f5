"""Whether a tangent or cotangent is shaped like what it pairs with, and the shape to ask for if not.

A tangent is like x, a cotangent like f(x): the same pytree structure, each leaf of the same shape.
Complex leaves are kept as (real, imaginary) pairs (``complex_parts``), one axis longer; the shapes are
named as the author wrote them (``complex (3,)``), not as the engine keeps them.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import optree


def shape_mismatch(given: Any, like: Any, complex_mask: tuple[bool, ...] | None = None,
                   given_complex: tuple[bool, ...] | None = None) -> str | None:
    """How ``given`` differs in structure or leaf shapes from ``like``, or None where it does not.

    ``complex_mask``: per leaf of ``like``, whether it is a complex leaf kept as pairs; ``given_complex``
    the same for ``given``'s leaves (None: as ``like``'s, where the structures agree).
    """
    given_leaves, given_spec = optree.tree_flatten(given, none_is_leaf=True)
    like_leaves, like_spec = optree.tree_flatten(like, none_is_leaf=True)
    mask = complex_mask or (False,) * len(like_leaves)
    if given_spec == like_spec and all(np.shape(g) == np.shape(w) for g, w in zip(given_leaves, like_leaves)):
        return None
    expected = _described(like_spec, like_leaves, mask)
    # Where the structures agree, a leaf in a complex place was made pairs (a real one read as t + 0i).
    if given_complex is None:
        given_complex = mask if given_spec == like_spec else (False,) * len(given_leaves)
    got = _described(given_spec, given_leaves, given_complex)
    return f"expected {expected}; got {got}"


def _described(spec: Any, leaves: list[Any], mask: tuple[bool, ...]) -> str:
    """A pytree's leaves as their shapes in its own structure: ``(3,)``, ``{'a': (2,), 'b': complex (3,)}``."""
    shapes = [_shape(leaf, complex_) for leaf, complex_ in zip(leaves, mask)]
    if spec.num_nodes == 1:  # a single leaf
        return shapes[0] if shapes else "nothing"
    return str(optree.tree_unflatten(spec, [_Shape(text) for text in shapes]))


def _shape(leaf: Any, complex_: bool) -> str:
    if leaf is None:
        return "None"
    shape = np.shape(leaf)
    return f"complex {shape[:-1]}" if complex_ else f"shape {shape}"


class _Shape(str):
    """A shape's text, shown without quotes inside its pytree's repr."""

    def __repr__(self) -> str:
        return str(self)
