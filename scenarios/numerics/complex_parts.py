"""Complex numbers as pairs of reals: how gradci differentiates, references and compares complex x.

A complex leaf z of shape ``s`` is kept as a float64 array of shape ``s + (2,)``, ``[..., 0]`` the real
part and ``[..., 1]`` the imaginary part (``torch.view_as_real``'s layout). A scenario with complex x
keeps x so (``Scenario.complex_parts`` says which leaves were complex), and f, with its complex
outputs taken apart the same way, is a real function of real arrays: f(a + ib) as
``(Re f, Im f)(a, b)``. Its finite-difference reference is then the real Jacobian of that map, made by
the machinery every real scenario uses, and every framework's result is brought to the same pairs
(``gradci.scenarios.numerics.complex_conventions``) before it is compared.

In these pairs a derivative with respect to z = a + ib is ``(∂/∂a, ∂/∂b)``; read back as one complex
number, ``∂/∂a + i ∂/∂b``, torch's convention. Works on numpy, torch and jax arrays alike.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np
import optree

# The dtype a complex leaf runs in for each cell dtype: the complex type whose parts are that dtype.
# float16 and bfloat16 have none that both frameworks offer (jax has no complex32).
COMPLEX_DTYPES = {"float64": "complex128", "float32": "complex64"}
# And back: a complex result's dtype named by its parts', as a cell's dtype is.
PARTS_DTYPES = {complex_dtype: dtype for dtype, complex_dtype in COMPLEX_DTYPES.items()}


def is_complex(leaf: Any) -> bool:
    """Whether ``leaf`` is a complex number or array (numpy, torch or jax)."""
    if isinstance(leaf, (complex, np.complexfloating)):
        return True
    is_complex_method = getattr(leaf, "is_complex", None)  # torch
    if callable(is_complex_method):
        return bool(is_complex_method())
    dtype = getattr(leaf, "dtype", None)
    try:
        return dtype is not None and np.issubdtype(dtype, np.complexfloating)
    except TypeError:  # a dtype numpy does not know (bfloat16 in jax): not complex
        return False


def as_pairs(leaf: Any) -> Any:
    """A complex leaf as its (real, imaginary) pairs, in its own framework; any other leaf as it is."""
    if not is_complex(leaf):
        return leaf
    if isinstance(leaf, (complex, np.complexfloating, np.ndarray)):
        leaf = np.asarray(leaf)
        return np.stack([leaf.real, leaf.imag], axis=-1).astype(np.float64)
    from array_api_compat import array_namespace

    xp = array_namespace(leaf)
    return xp.stack([xp.real(leaf), xp.imag(leaf)], axis=-1)


def tree_as_pairs(tree: Any) -> Any:
    """Every complex leaf of ``tree`` as pairs (``as_pairs``)."""
    return optree.tree_map(as_pairs, tree, none_is_leaf=True)


def joined(pairs: Any) -> Any:
    """Pairs (real, imaginary) on the last axis as one complex array, in their own framework."""
    return pairs[..., 0] + 1j * pairs[..., 1]


@dataclasses.dataclass(frozen=True)
class ComplexParts:
    """Which leaves of a scenario's x are complex, kept as pairs.

    ``mask`` has one entry per leaf of x, in ``optree``'s order (None a leaf).
    """

    mask: tuple[bool, ...]

    def tangent_like_x(self, tangent: Any) -> Any:
        """A tangent given for complex x with its real leaves where x is complex read as t + 0i.

        A real direction is a direction in the complex plane too (along the real axis); without this
        it would be taken apart as a real array, half the size of x's pairs. A tangent of another
        structure than x is left as it is, for the shape check to refuse.
        """
        leaves, spec = optree.tree_flatten(tangent, none_is_leaf=True)
        if len(leaves) != len(self.mask):
            return tangent
        return optree.tree_unflatten(spec, [np.asarray(leaf) + 0j if complex_ and leaf is not None
                                            and not is_complex(leaf) else leaf
                                            for leaf, complex_ in zip(leaves, self.mask)])

    def joined(self, tree: Any) -> Any:
        """A tree like x with its complex leaves, kept as pairs, joined again."""
        leaves, spec = optree.tree_flatten(tree, none_is_leaf=True)
        return optree.tree_unflatten(spec, [joined(leaf) if complex_ else leaf
                                            for leaf, complex_ in zip(leaves, self.mask)])

    def over_pairs(self, fn: Callable, complex_outputs: list[bool] | None = None) -> Callable:
        """``fn`` as a real function: x's complex leaves given as pairs, its complex outputs returned as pairs.

        ``complex_outputs``, where given, is set at each call to which of the outputs' leaves were complex.
        """
        def on_pairs(x, *contexts):
            out = fn(self.joined(x), *contexts)
            if complex_outputs is not None:
                complex_outputs[:] = [is_complex(leaf) for leaf in optree.tree_leaves(out, none_is_leaf=True)]
            return tree_as_pairs(out)

        return on_pairs


def cotangent_like_outputs(cotangent: Any, outputs: Any, complex_outputs: list[bool],
                           given_complex: tuple[bool, ...] = ()) -> Any:
    """A cotangent with its real leaves where f's output is complex read as t + 0i.

    As a real tangent of complex x is (``ComplexParts.tangent_like_x``): a real weight on a complex output
    weighs its real part. ``outputs``: f(x), complex leaves as pairs (which ``complex_outputs`` marks);
    ``given_complex``: which of the cotangent's leaves were given complex (kept as pairs since), where
    known. A leaf shaped like its output's pairs stays as it is; one of another structure or shape is
    left as it is, for the shape check to refuse.
    """
    leaves, spec = optree.tree_flatten(cotangent, none_is_leaf=True)
    out_leaves, out_spec = optree.tree_flatten(outputs, none_is_leaf=True)
    if spec != out_spec or len(out_leaves) != len(complex_outputs):
        return cotangent
    given = given_complex or (False,) * len(leaves)

    def read(leaf: Any, out: Any, complex_: bool, was_complex: bool) -> Any:
        if complex_ and not was_complex and leaf is not None and np.shape(leaf) == np.shape(out)[:-1]:
            return as_pairs(np.asarray(leaf) + 0j)
        return leaf

    return optree.tree_unflatten(spec, [read(*parts) for parts in zip(leaves, out_leaves, complex_outputs, given)])


def outputs_as_pairs(fn: Callable) -> Callable:
    """``fn`` with its complex outputs returned as pairs (its inputs as they are)."""
    def with_pairs(x, *contexts):
        return tree_as_pairs(fn(x, *contexts))

    return with_pairs
