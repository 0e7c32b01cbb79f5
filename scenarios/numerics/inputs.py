"""What a scenario may be given as x, tangents and contexts, and what the engine keeps of it.

Authors hand in numpy arrays, torch tensors, jax arrays, Python numbers and containers of them; the
engine keeps numpy, once, at construction (framework arrays detached and copied to the host), so
that every backend and the reference start from the same values:

- x and tangents are what is differentiated: every leaf must be floating point (a Python int is taken
  as a float) and becomes a float64 array, later cast to each cell's dtype.
- Complex x and tangents are kept as (real, imaginary) pairs of float64 (``complex_parts``), by the
  scenario, before they get here.
- In contexts only floating-point leaves become float64 arrays (cast to each cell's dtype later), and
  complex ones complex128 arrays (cast to the complex type of each cell's dtype);
  integers, booleans, index arrays, strings and None pass through unchanged, since a function indexes
  or counts with them and a cast would break it.
"""
from __future__ import annotations

import sys
from typing import Any

import numpy as np
import optree

from gradci.scenarios.contract.errors import ScenarioInputError


def on_host(leaf: Any) -> Any:
    """A torch tensor or jax array as a numpy array of its own, anything else as it is.

    Floating point ones become float64, which also covers bfloat16, which numpy has no native type for.
    """
    torch = sys.modules.get("torch")  # a tensor exists only once torch is imported
    if torch is not None and isinstance(leaf, torch.Tensor):
        tensor = leaf.detach().to("cpu")
        if tensor.is_floating_point():
            tensor = tensor.to(torch.float64)
        return np.array(tensor.numpy(force=True), copy=True)
    jax = sys.modules.get("jax")
    if jax is not None and isinstance(leaf, jax.Array):
        array = np.array(leaf, copy=True)
        return array.astype(np.float64) if jax.numpy.issubdtype(leaf.dtype, jax.numpy.floating) else array
    return leaf


def _is_float(leaf: Any) -> bool:
    if isinstance(leaf, np.ndarray):
        return leaf.dtype.kind == "f"
    return isinstance(leaf, (float, np.floating))


def differentiable(tree: Any, what: str, needs: str, name: str) -> Any:
    """``tree`` (x or a tangent) with every leaf a float64 array.

    ``needs`` says what the operator expects, for the error naming a leaf that is not floating point.
    """
    paths, leaves, spec = optree.tree_flatten_with_path(tree, none_is_leaf=True)
    converted = []
    for path, leaf in zip(paths, leaves):
        leaf = on_host(leaf)
        if isinstance(leaf, int) and not isinstance(leaf, bool):
            leaf = float(leaf)  # a Python int in x is a point on the real line
        if not _is_float(leaf):
            where = f" at {what}{leaf_path(path)}" if path else ""
            raise ScenarioInputError(f"scenario {name!r}: {needs}; got {describe(leaf)}{where}")
        converted.append(np.asarray(leaf, dtype=np.float64))
    if not converted:
        raise ScenarioInputError(f"scenario {name!r}: {needs}; got an empty {type(tree).__name__}")
    return optree.tree_unflatten(spec, converted)


def held_fixed(tree: Any) -> Any:
    """A context with its floating-point leaves as float64 arrays, its complex ones as complex128.

    Every other leaf stays as given (framework arrays on the host).
    """
    def convert(leaf):
        leaf = on_host(leaf)
        if isinstance(leaf, (np.ndarray, complex, np.complexfloating)) and np.iscomplexobj(leaf):
            return np.asarray(leaf, dtype=np.complex128)
        return np.asarray(leaf, dtype=np.float64) if _is_float(leaf) else leaf

    return optree.tree_map(convert, tree, none_is_leaf=True)


def describe(value: Any) -> str:
    """A value in a few words, for an error message: ``int64 array of shape (3,)``, ``str 'abc'``."""
    if isinstance(value, np.ndarray):
        return f"{value.dtype} array of shape {value.shape}"
    if value is None:
        return "None"
    text = repr(value)
    return f"{type(value).__name__} {text[:40] + '…' if len(text) > 40 else text}"


def leaf_path(path: tuple) -> str:
    return "".join(f"[{key!r}]" for key in path)
