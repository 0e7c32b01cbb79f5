"""Finite differences' stencil points evaluated together.

scipy.differentiate asks for f at hundreds of points at once; calling f once per point costs a
framework's eager dispatch each time. Where the reference implementation is jax (jit of vmap) or
torch (torch.func.vmap), all the points go through one call instead. That call is trusted only once
it matched the point-by-point loop at two points; one that raises (data-dependent Python control
flow, ``.item()``, an in-place update of state) or disagrees is refused for good, and the loop,
where a raising point is NaN on its own, takes over. numpy and framework-neutral functions are
evaluated point by point: vmapping them through torch measured no faster on the built-in library.
"""
from __future__ import annotations

import os
import warnings
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import numpy as np
import optree

from gradci.scenarios.authoring.scenario import Scenario
from gradci.scenarios.reference.evaluation_memo import EvaluationMemo
from gradci.scenarios.reference.flat_function import FlatFunction, reference_framework

# "off": every stencil point evaluated on its own, as before batching (for comparison).
BATCHING_ENV = "GRADCI_REFERENCE_BATCHING"
# How closely the batched call must match the loop: fused and batched kernels may round a sum in
# another order, nothing more.
AGREEMENT_RTOL = 1e-13
# jit compiles once per batch size: sizes are rounded up to powers of two from here.
SMALLEST_BUCKET = 8
MAX_FUNCTIONS = 512


def batching_enabled() -> bool:
    return os.environ.get(BATCHING_ENV, "on").strip().lower() not in ("off", "0", "false", "no")


class BatchedFunction:
    """f at a batch of flat points, rows (k, m) → rows (k, n), once validated against the loop."""

    def __init__(self, call: Callable[[np.ndarray], np.ndarray]):
        self._call = call
        self.trusted = False
        self.refused: str | None = None  # why the loop evaluates this function, once refused

    def evaluate(self, rows: np.ndarray, g: FlatFunction) -> np.ndarray | None:
        """f at every row, or None (and refused from now on) where the batched call cannot be used."""
        try:
            # vmap's own notices (torch: "not yet implemented the batching rule for ...") are ours to
            # keep quiet; what f itself warns about, its cells report when the backends run it.
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                values = np.asarray(self._call(rows), dtype=np.float64)
        except Exception as exc:  # noqa: BLE001 - whatever stops the batched call, the loop can do
            self.refused = f"the batched call raised {type(exc).__name__}"
            return None
        if values.shape != (len(rows), g.y0.size):
            self.refused = f"the batched call returned shape {values.shape}, not {(len(rows), g.y0.size)}"
            return None
        if not self.trusted:
            sample = [0, len(rows) - 1]
            looped = np.stack([g(np.array(rows[i])) for i in sample])
            if not _agree(values[sample], looped):
                self.refused = "the batched call disagreed with the loop"
                return None
            self.trusted = True
        return values


def _agree(batched: np.ndarray, looped: np.ndarray) -> bool:
    scale = np.max(np.abs(looped[np.isfinite(looped)]), initial=0.0)
    return bool(np.allclose(batched, looped, rtol=AGREEMENT_RTOL, atol=AGREEMENT_RTOL * scale, equal_nan=True))


_BATCHED: OrderedDict[str, BatchedFunction | None] = OrderedDict()


def batched_function(scenario: Scenario) -> BatchedFunction | None:
    """The scenario's f over batches, built (and compiled) once per function; None where its
    reference implementation has no batching (numpy, framework-neutral) or it was refused."""
    key = scenario.function_fingerprint()
    if key not in _BATCHED:
        builder = _BUILDERS.get(reference_framework(scenario))
        try:
            _BATCHED[key] = BatchedFunction(builder(scenario)) if builder else None
        except Exception:  # noqa: BLE001 - e.g. contexts the framework cannot take: the loop can
            _BATCHED[key] = None
        if len(_BATCHED) > MAX_FUNCTIONS:
            _BATCHED.popitem(last=False)
    batched = _BATCHED[key]
    return batched if batched is not None and batched.refused is None else None


def _unraveller(x: Any) -> Callable[[Any], Any]:
    """v (a framework's flat vector) → x's pytree of views, as numpy_function.ravel's inverse."""
    leaves, spec = optree.tree_flatten(x, none_is_leaf=True)
    shapes = [np.shape(leaf) for leaf in leaves]
    offsets = np.cumsum([0] + [int(np.prod(shape)) for shape in shapes]).tolist()

    def unravel(v):
        return optree.tree_unflatten(spec, [v[a:b].reshape(shape)
                                            for a, b, shape in zip(offsets, offsets[1:], shapes)])

    return unravel


def _jax_batched(scenario: Scenario) -> Callable[[np.ndarray], np.ndarray]:
    import jax
    import jax.numpy as jnp

    from gradci.scenarios.adapters import get_framework
    from gradci.scenarios.adapters.adapter import arrays_apart

    fw = get_framework("jax")  # float64 needs the adapter's x64 switch, before any array exists
    fn, unravel = scenario.implementation("jax"), _unraveller(scenario.x)
    cpu = jax.devices("cpu")[0]
    # The contexts' arrays are the compiled function's arguments (not constants baked into it); the
    # rest (counts, strings) stays as the function would see it.
    context_arrays, with_arrays = arrays_apart(fw.to_framework(scenario.contexts, "float64", "cpu"))

    def flat_f(v, arrays):
        out = fn(unravel(v), *with_arrays(arrays))
        return jnp.concatenate([jnp.ravel(jnp.asarray(leaf, dtype=jnp.float64))
                                for leaf in optree.tree_leaves(out, none_is_leaf=True)])

    compiled = jax.jit(jax.vmap(flat_f, in_axes=(0, None)))

    def call(rows: np.ndarray) -> np.ndarray:
        bucket = max(SMALLEST_BUCKET, 1 << (len(rows) - 1).bit_length())
        padded = np.concatenate([rows, np.repeat(rows[:1], bucket - len(rows), axis=0)])
        return np.asarray(compiled(jax.device_put(padded, cpu), context_arrays))[:len(rows)]

    return call


def _torch_batched(scenario: Scenario) -> Callable[[np.ndarray], np.ndarray]:
    import torch

    from gradci.scenarios.adapters import get_framework

    fw = get_framework("torch")
    fn, unravel = scenario.implementation("torch"), _unraveller(scenario.x)

    def flat_f(v, contexts):
        out = fn(unravel(v), *contexts)
        return torch.cat([torch.as_tensor(leaf, dtype=torch.float64).reshape(-1)
                          for leaf in optree.tree_leaves(out, none_is_leaf=True)])

    # "same": a seeded draw inside f gives every point the numbers its own call would get.
    mapped = torch.func.vmap(flat_f, in_dims=(0, None), randomness="same")

    def call(rows: np.ndarray) -> np.ndarray:
        # Contexts converted per call: state a function updates starts from its declared value.
        contexts = fw.to_framework(scenario.contexts, "float64", "cpu")
        return fw.to_numpy(mapped(torch.tensor(rows), contexts))

    return call


_BUILDERS = {"jax": _jax_batched, "torch": _torch_batched}


class StencilEvaluator:
    """g at many points (rows (k, m) → values (k, n)): each distinct point once, from the memo
    where another scenario of the same function evaluated it, else batched where f allows."""

    def __init__(self, g: FlatFunction, scenario: Scenario, memo: EvaluationMemo | None = None):
        self.g = g
        self._scenario = scenario
        self._memo = memo
        self._function = scenario.function_fingerprint()

    def __call__(self, points: np.ndarray) -> np.ndarray:
        points = np.ascontiguousarray(points, dtype=np.float64)
        values = np.empty((len(points), self.g.y0.size))
        pending: dict[bytes, list[int]] = {}
        for i, point in enumerate(points):
            key = point.tobytes()
            known = self._memo.lookup(self._function, key) if self._memo is not None else None
            if known is not None:
                values[i] = known
            else:
                pending.setdefault(key, []).append(i)
        if pending:
            firsts = [rows[0] for rows in pending.values()]
            computed = self._evaluate(points[firsts])
            for (key, rows), value in zip(pending.items(), computed):
                values[rows] = value
                if self._memo is not None:
                    self._memo.store(self._function, key, value.copy())
        return values

    def _evaluate(self, rows: np.ndarray) -> np.ndarray:
        batched = batched_function(self._scenario) if batching_enabled() and len(rows) > 1 else None
        if batched is not None:
            values = batched.evaluate(rows, self.g)
            if values is not None:
                self.g.evaluations += len(rows)
                return values
        # Each point its own copy: f may write into its argument or read past a view's edges.
        return np.stack([self.g(np.array(row)) for row in rows])
