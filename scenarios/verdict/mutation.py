"""Which argument a cell's computation changed in place: the culprit, named on the cell.

A backend must leave x, the tangent and the contexts as it found them. When one changed, the cell says
which: the function writing into its differentiated input is a bug in the function (fail); one
updating a context in place (running statistics) is state the scenario did not declare (error, with
the declaration that fixes it).
"""
from __future__ import annotations

from typing import Any

import numpy as np
import optree

from gradci.scenarios.contract.cell import Status
from gradci.scenarios.numerics.inputs import leaf_path

# What torch says when a function writes into a leaf tensor that requires grad (torch-rev's x)...
_TORCH_LEAF_IN_PLACE = "a leaf Variable that requires grad is being used in an in-place operation"
# ...and into a tensor captured from outside a torch.func transform (an undeclared context).
_TORCH_FUNC_CAPTURED = "that would mutate a captured Tensor"
_DECLARE_STATE = "declare it with state=({index}) so that every evaluation starts from its value"


def snapshot(inputs: tuple[Any, Any, tuple], copy: bool = True) -> list[list[tuple[str, Any]]]:
    """Bitwise host copies of (x, tangent, contexts), each leaf with its name.

    Without ``copy``, their values as they are now, read in place where they live on the host (to
    compare, not to keep).
    """
    x, tangent, contexts = inputs
    parts = [("x", x), ("the tangent", tangent)] + [(f"context {i}", c) for i, c in enumerate(contexts)]
    return [[(name + leaf_path(path), _to_host(leaf, copy)) for path, leaf in _leaves_with_paths(tree)]
            for name, tree in parts]


def _leaves_with_paths(tree: Any) -> list[tuple[tuple, Any]]:
    paths, leaves, _ = optree.tree_flatten_with_path(tree, none_is_leaf=True)
    return list(zip(paths, leaves))


def _to_host(leaf: Any, copy: bool) -> Any:
    if hasattr(leaf, "detach"):  # torch
        tensor = leaf.detach().cpu()  # a copy already, from a GPU
        # numpy has no bfloat16; float32 holds every bfloat16 value exactly
        if str(tensor.dtype) == "torch.bfloat16":
            return tensor.float().numpy()
        return (tensor.clone() if copy and tensor.device == leaf.device else tensor).numpy()
    return np.array(leaf, copy=copy or None) if hasattr(leaf, "shape") else leaf


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, np.ndarray):
        # Equal without NaNs, the common case, costs a fraction of the comparison that allows them.
        return a.shape == b.shape and (np.array_equal(a, b) or np.array_equal(a, b, equal_nan=True))
    return a == b


def mutation(before: list, inputs: tuple[Any, Any, tuple]) -> tuple[Status, str] | None:
    """The first argument of ``inputs`` that changed in place since ``before``, as (status, message).

    ``before`` is its ``snapshot``. None where none changed.
    """
    after = snapshot(inputs, copy=False)
    for part_before, part_after in zip(before, after):
        for (name, old), (_, new) in zip(part_before, part_after):
            if _same(old, new):
                continue
            if name.startswith("x"):
                return Status.FAIL, f"the function modified its differentiated input {name} in place"
            if name.startswith("context"):
                index = name.split()[1].split("[")[0]
                return Status.ERROR, (f"the function updates {name} in place (state, such as running statistics): "
                                 + _DECLARE_STATE.format(index=f"{index},"))
            return Status.FAIL, f"the backend modified {name} in place"
    return None


def in_place_culprit(exc: BaseException) -> tuple[Status, str] | None:
    """(status, message) for an exception by which the framework refused an in-place write, or None."""
    if _TORCH_LEAF_IN_PLACE in str(exc):
        return Status.FAIL, f"the function modified its differentiated input x in place (torch: {_TORCH_LEAF_IN_PLACE})"
    if _TORCH_FUNC_CAPTURED in str(exc):
        return Status.ERROR, ("the function updates a context in place (torch.func refuses to mutate a captured "
                         "tensor): " + _DECLARE_STATE.format(index="..."))
    return None
