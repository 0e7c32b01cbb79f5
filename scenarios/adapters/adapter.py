"""What every framework adapter shares.

Its name and its table of dtypes, and how non-float arrays and Python values among the arguments are
told apart.
"""
from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable
from typing import Any

import optree
from array_api_compat import is_jax_array, is_torch_array

# numpy dtype kinds of the non-float arrays a function indexes, masks or counts with (bool, signed and
# unsigned integers): adapters hand them over as the framework's arrays of the same dtype; any other
# non-float array (strings, objects) stays numpy.
INDEXING_KINDS = "biu"


@dataclasses.dataclass
class Compilations:
    """How many programs the framework traced and compiled while it was counting."""

    traces: int = 0
    compiles: int = 0

    def __bool__(self) -> bool:
        return bool(self.traces or self.compiles)

    def __str__(self) -> str:
        return f"traced {self.traces} and compiled {self.compiles} program{'s' * (self.compiles != 1)}"


class FrameworkAdapter:
    name: str = ""
    dtypes: dict[str, Any] = {}  # gradci's dtype name → the framework's dtype

    def to_framework(self, tree: Any, dtype: str, device: str, requires_grad: bool = False) -> Any:
        """numpy pytrees as the framework's arrays of ``dtype`` on ``device``, each a copy of its own."""
        raise NotImplementedError

    def adopt(self, tree: Any) -> Any:
        """Adopt float64 numpy arrays as the framework's arrays on the CPU.

        The arrays are made for one call and held by nobody else, so they are taken without a copy where
        the framework can share their memory (by default, copied as ``to_framework`` does).
        """
        return self.to_framework(tree, "float64", "cpu")

    def result_dtypes(self, tree: Any) -> set[str]:
        """The dtypes of a result's arrays, by gradci's names (``float32``, ``bfloat16``), read as they came.

        Read before ``to_numpy``, which makes every leaf float64.
        """
        return {dtype_name(leaf.dtype) for leaf in optree.tree_leaves(tree, none_is_leaf=True)
                if hasattr(leaf, "dtype")}

    def dtype_unavailable(self, device: str, dtype: str) -> str | None:
        if dtype not in self.dtypes:
            return f"{self.name} has no dtype {dtype}"
        return None

    def counting_compilations(self) -> contextlib.AbstractContextManager[Compilations | None]:
        """Count the programs traced and compiled inside the block (None: this framework compiles nothing)."""
        return contextlib.nullcontext()

    # Precision beyond the dtype (``gradci.scenarios.numerics.precision``): what the framework's switches say now,
    # a pin applied around a cell, and whether float32 products on ``device`` run in TF32.
    def precision_text(self) -> str:
        return ""

    def pinned_precision(self, setting: str | None) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()

    def tf32_active(self, device: str, dtype: str) -> bool:
        return False


def dtype_name(dtype: Any) -> str:
    """A numpy, jax or torch dtype by its plain name: ``torch.float32`` and ``float32`` are both ``float32``."""
    return str(dtype).removeprefix("torch.")


def arrays_apart(tree: Any) -> tuple[list, Callable[[list], Any]]:
    """(the torch or jax arrays among the leaves of ``tree``, ``tree`` rebuilt with others in their places).

    Only the arrays go through a compiler (``jax.jit`` traces its arguments): a count, a flag, a
    string or None stays the Python value the function was given, as a constant of the computation."""
    leaves, spec = optree.tree_flatten(tree, none_is_leaf=True)
    is_array = [is_torch_array(leaf) or is_jax_array(leaf) for leaf in leaves]

    def rebuild(arrays: list) -> Any:
        given = iter(arrays)
        return optree.tree_unflatten(spec, [next(given) if array else leaf for leaf, array in zip(leaves, is_array)])

    return [leaf for leaf, array in zip(leaves, is_array) if array], rebuild
