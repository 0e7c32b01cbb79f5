"""Helpers every scenario family shares: seeded draws, constants cast like the input, scenario names."""
from __future__ import annotations

import inspect
import zlib
from collections.abc import Callable
from typing import Any

import numpy as np
import optree

from gradci.scenarios.authoring.expectations import Expect
from gradci.scenarios.operators.records import OPERATOR_RECORDS

# torch.autograd.functional.jacobian and hessian (torch-rev) stack one row per output element (per
# input element for the Hessian) and raise where there are none: a torch bug an empty batch meets.
FUNCTIONAL_ON_EMPTY = Expect(backend="torch-rev", raises=RuntimeError,
                             reason="torch.autograd.functional.jacobian and hessian raise on an input with no "
                                    "elements (stack expects a non-empty TensorList); not yet filed upstream")


def rng(key: str) -> np.random.Generator:
    """A generator seeded by a name, so adding a scenario never moves another one's input point."""
    return np.random.default_rng(zlib.crc32(key.encode()))


def scenario_name(family: str, what: str, operator: str, variant: str | None = None) -> str:
    return "/".join(part for part in (family, what, operator, variant) if part)


def operator_tags(operator: str) -> tuple[str, ...]:
    return ("second-order",) if OPERATOR_RECORDS[operator].order == 2 else ()


def _first_array(tree: Any) -> Any:
    import array_api_compat

    for leaf in optree.tree_leaves(tree, none_is_leaf=True):
        if array_api_compat.is_array_api_obj(leaf):
            return leaf
    raise TypeError("no array in the input to take a framework, dtype and device from")


def like(tree: Any, x: Any) -> Any:
    """Float numpy constants in ``tree`` as arrays of x's framework, dtype and device.

    A function that captures data (rather than receiving it as a context) must cast it itself:
    the engine only converts what it is handed.
    """
    import array_api_compat

    leaf = _first_array(x)
    xp = array_api_compat.array_namespace(leaf)
    device = array_api_compat.device(leaf)

    def cast(value):
        if isinstance(value, np.ndarray) and np.issubdtype(value.dtype, np.floating):
            return xp.asarray(value, dtype=leaf.dtype, device=device)
        return value

    return optree.tree_map(cast, tree, none_is_leaf=True)


def eye_like(n: int, x: Any) -> Any:
    import array_api_compat

    xp = array_api_compat.array_namespace(x)
    return xp.eye(n, dtype=x.dtype, device=array_api_compat.device(x))


def derived(outer: Callable, inner: Callable) -> Callable:
    """Mark ``outer`` as generated around ``inner``.

    The engine fingerprints a scenario by its function's source; a generic wrapper has the same source
    for every scenario it wraps, so point ``__wrapped__`` at the code that varies (inspect.getsource
    follows it) while pinning the wrapper's own call signature.
    """
    outer.__signature__ = inspect.signature(outer)  # type: ignore[attr-defined]  # a function's attribute, not Callable's
    outer.__wrapped__ = inner  # type: ignore[attr-defined]  # as functools.wraps sets it
    outer.__qualname__ = f"{outer.__qualname__}[{getattr(inner, '__qualname__', 'fn')}]"
    return outer


def draw_like(tree: Any, generator: np.random.Generator) -> Any:
    """Standard normal arrays with the structure and shapes of ``tree``."""
    return optree.tree_map(lambda leaf: generator.standard_normal(np.shape(leaf)), tree, none_is_leaf=True)


def evaluate(scenario) -> Any:
    """f(x, *contexts) in float64 through the implementation the engine takes references from."""
    from gradci.scenarios.reference.flat_function import float64_callable

    out = float64_callable(scenario)(scenario.x, *scenario.contexts)
    return optree.tree_map(lambda leaf: np.asarray(leaf, dtype=np.float64), out, none_is_leaf=True)


def tangent_structure(scenario) -> Any:
    """What a tangent must look like: x for jvp and hvp, f(x) for vjp."""
    if OPERATOR_RECORDS[scenario.operator].takes_tangent:
        return scenario.x
    return evaluate(scenario)


__all__ = ["FUNCTIONAL_ON_EMPTY", "rng", "scenario_name", "operator_tags", "like", "eye_like",
           "derived", "draw_like", "evaluate", "tangent_structure"]
