"""The scenario's function as a float64 numpy function of one flat vector: what finite differences need."""
from __future__ import annotations

from typing import Any, Callable

import numpy as np
import optree

from scenarios.scenario import Scenario


def ravel(tree: Any) -> tuple[np.ndarray, Callable[[np.ndarray], Any]]:
    """Flatten a pytree of arrays into one float64 vector, with the inverse."""
    leaves, spec = optree.tree_flatten(tree, none_is_leaf=True)
    arrays = [np.asarray(leaf, dtype=np.float64) for leaf in leaves]
    shapes = [a.shape for a in arrays]
    sizes = [a.size for a in arrays]
    flat = np.concatenate([a.reshape(-1) for a in arrays]) if arrays else np.zeros(0)
    splits = np.cumsum(sizes)[:-1]

    def unravel(vector: np.ndarray) -> Any:
        parts = np.split(np.asarray(vector), splits)
        return optree.tree_unflatten(spec, [p.reshape(s) for p, s in zip(parts, shapes)])

    return flat, unravel


def float64_callable(scenario: Scenario) -> Callable:
    """f(x, *contexts) on numpy float64 pytrees, from whichever implementation can run on the CPU.

    Prefer the numpy (or framework-neutral) implementation; fall back to torch, then jax, on the CPU in
    float64, so that every framework is held to the same reference.
    """
    for framework in ("numpy", "torch", "jax"):
        fn = scenario.implementation(framework)
        if fn is None:
            continue
        if framework == "numpy":
            return fn
        from scenarios.frameworks import get_framework

        fw = get_framework(framework)

        def through_framework(x, *contexts, _fw=fw, _fn=fn):
            args = [_fw.to_framework(tree, "float64", "cpu") for tree in (x, *contexts)]
            return _fw.to_numpy(_fn(*args))

        return through_framework
    raise ValueError(f"scenario {scenario.name!r} has no implementation to compute a reference with")


class FlatFunction:
    """g(v) = ravel(f(unravel(v), *contexts)) with the output's structure remembered."""

    def __init__(self, scenario: Scenario):
        self._fn = float64_callable(scenario)
        self._contexts = scenario.contexts
        self.v0, self.unravel_input = ravel(scenario.x)
        self.value = self._call_tree(scenario.x)
        self.y0, self.unravel_output = ravel(self.value)
        self.evaluations = 0

    def _call_tree(self, x: Any) -> Any:
        out = self._fn(x, *self._contexts)
        return optree.tree_map(lambda leaf: np.asarray(leaf, dtype=np.float64), out, none_is_leaf=True)

    def __call__(self, v: np.ndarray) -> np.ndarray:
        self.evaluations += 1
        return ravel(self._call_tree(self.unravel_input(v)))[0]
