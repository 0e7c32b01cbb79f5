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
from gradci.scenarios.reference.flat_function import FlatFunction, reference_framework, reference_implementation

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
    """f at a batch of flat points, rows (k, m) → rows (k, n), once validated against the loop.

    ``call`` may hand f the rows themselves (torch, without a copy): f may write into them.
    """

    def __init__(self, call: Callable[[np.ndarray], np.ndarray]):
        self._call = call
        self.trusted = False
        self.refused: str | None = None  # why the loop evaluates this function, once refused

    def evaluate(self, rows: np.ndarray, g: FlatFunction) -> np.ndarray | None:
        """f at every row, or None (and refused from now on) where the batched call cannot be used.

        f gets a copy: the loop takes over from ``rows`` where the batched call is refused.
        """
        return self._checked(lambda: self._call(rows.copy()), len(rows), lambda i: rows[(0, -1)[i]], g)

    def evaluate_line(self, origin: np.ndarray, direction: np.ndarray, coefficients: np.ndarray,
                      g: FlatFunction) -> np.ndarray | None:
        """f at origin + c·direction for each coefficient c, as ``evaluate`` at ``line_rows``.

        f gets the points themselves, made for this call (the loop, if it takes over, makes its own).
        """
        ends = coefficients[[0, -1]]
        return self._checked(lambda: self._call(line_rows(origin, direction, coefficients)), len(coefficients),
                             lambda i: line_rows(origin, direction, ends[i:i + 1])[0], g)

    def _checked(self, compute: Callable[[], np.ndarray], count: int, end_row: Callable[[int], np.ndarray],
                 g: FlatFunction) -> np.ndarray | None:
        """``compute()``'s values, checked once against the loop at the first and last rows.

        Those rows are ``end_row(0)`` and ``end_row(1)``.
        """
        try:
            # vmap's own notices (torch: "not yet implemented the batching rule for ...") are ours to
            # keep quiet; what f itself warns about, its cells report when the backends run it.
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                values = np.asarray(compute(), dtype=np.float64)
        except Exception as exc:  # noqa: BLE001 - whatever stops the batched call, the loop can do
            self.refused = f"the batched call raised {type(exc).__name__}"
            return None
        if values.shape != (count, g.y0.size):
            self.refused = f"the batched call returned shape {values.shape}, not {(count, g.y0.size)}"
            return None
        if not self.trusted:
            looped = np.stack([g(np.array(end_row(i))) for i in (0, 1)])
            if not _agree(values[[0, count - 1]], looped):
                self.refused = "the batched call disagreed with the loop"
                return None
            self.trusted = True
        return values


def line_rows(origin: np.ndarray, direction: np.ndarray, coefficients: np.ndarray) -> np.ndarray:
    """The points origin + c·direction (k, m), in one array of their own, filled in place.

    A second temporary of k 100k-element points doubles the memory traffic, and each fresh one is
    page-faulted in (numpy asks for huge pages for large arrays; torch, measured building them, took
    4× as long).
    """
    rows = np.multiply(np.asarray(coefficients, dtype=np.float64)[:, None], direction)
    rows += origin
    return rows


def _agree(batched: np.ndarray, looped: np.ndarray) -> bool:
    scale = np.max(np.abs(looped[np.isfinite(looped)]), initial=0.0)
    return bool(np.allclose(batched, looped, rtol=AGREEMENT_RTOL, atol=AGREEMENT_RTOL * scale, equal_nan=True))


_BATCHED: OrderedDict[str, BatchedFunction | None] = OrderedDict()


def batched_function(scenario: Scenario) -> BatchedFunction | None:
    """The scenario's f over batches, built (and compiled) once per function.

    None where its reference implementation has no batching (numpy, framework-neutral) or it was
    refused.
    """
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
    fn, unravel = reference_implementation(scenario, "jax"), _unraveller(scenario.x)
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
    """f over a batch of flat points, numpy rows (k, m) → numpy values (k, n).

    The rows are f's to keep (a tensor sharing their memory).
    """
    import torch

    from gradci.scenarios.adapters import get_framework

    fw = get_framework("torch")
    fn, unravel = reference_implementation(scenario, "torch"), _unraveller(scenario.x)

    def flat_f(v, contexts):
        out = fn(unravel(v), *contexts)
        return torch.cat([torch.as_tensor(leaf, dtype=torch.float64).reshape(-1)
                          for leaf in optree.tree_leaves(out, none_is_leaf=True)])

    # "same": a seeded draw inside f gives every point the numbers its own call would get.
    mapped = torch.func.vmap(flat_f, in_dims=(0, None), randomness="same")

    def run(rows: np.ndarray) -> np.ndarray:
        # Contexts converted per call: state a function updates starts from its declared value.
        contexts = fw.to_framework(scenario.contexts, "float64", "cpu")
        return fw.to_numpy(mapped(torch.from_numpy(rows), contexts))

    return run


_BUILDERS = {"jax": _jax_batched, "torch": _torch_batched}


class StencilEvaluator:
    """g at many points, rows (k, m) → values (k, n).

    Each distinct point is evaluated once: from the memo where another scenario of the same function
    evaluated it, else batched where f allows.
    """

    def __init__(self, g: FlatFunction, scenario: Scenario, memo: EvaluationMemo | None = None):
        self.g = g
        self._scenario = scenario
        self._memo = memo
        self._function = scenario.function_fingerprint()
        self._x_key: bytes | None = None

    def _at_x(self) -> bytes:
        if self._x_key is None:
            self._x_key = self.g.v0.tobytes()
        return self._x_key

    def __call__(self, points: np.ndarray) -> np.ndarray:
        points = np.ascontiguousarray(points, dtype=np.float64)
        values = np.empty((len(points), self.g.y0.size))
        pending: dict[bytes, list[int]] = {}
        for i, point in enumerate(points):
            key = point.tobytes()
            if key == self._at_x():  # f(x): the flat function has it
                known: np.ndarray | None = self.g.y0
                if self._memo is not None:
                    self._memo.served_at_x()
            else:
                known = self._memo.lookup(self._function, key) if self._memo is not None else None
            if known is not None:
                values[i] = known
            else:
                pending.setdefault(key, []).append(i)
        if pending:
            firsts = [rows[0] for rows in pending.values()]
            computed = self.evaluate(points[firsts])
            for (key, rows), value in zip(pending.items(), computed):
                values[rows] = value
                if self._memo is not None:
                    self._memo.store(self._function, key, value.copy())
        return values

    def line(self, direction: np.ndarray, scale: float) -> LineEvaluator:
        """g along x + s·scale·direction, as a function of s."""
        return LineEvaluator(self, direction, scale)

    def evaluate(self, rows: np.ndarray) -> np.ndarray:
        """g at every row, each evaluated (no memo): batched where f allows, else point by point."""
        batched = batched_function(self._scenario) if batching_enabled() and len(rows) > 1 else None
        if batched is not None:
            values = batched.evaluate(rows, self.g)
            if values is not None:
                self.g.evaluations += len(rows)
                return values
        return self._point_by_point(rows)

    def evaluate_line(self, direction: np.ndarray, coefficients: np.ndarray) -> np.ndarray:
        """g at x + c·direction for each coefficient c, each evaluated (no memo), as ``evaluate``."""
        batched = batched_function(self._scenario) if batching_enabled() and len(coefficients) > 1 else None
        if batched is not None:
            values = batched.evaluate_line(self.g.v0, direction, coefficients, self.g)
            if values is not None:
                self.g.evaluations += len(coefficients)
                return values
        return np.stack([self.g.along(direction, float(c)) for c in coefficients])

    def _point_by_point(self, rows: np.ndarray) -> np.ndarray:
        # Each point its own copy: f may write into its argument or read past a view's edges.
        return np.stack([self.g(np.array(row)) for row in rows])


class LineEvaluator:
    """g along the line x + s·scale·direction, for a column of s (k, 1) → values (k, n).

    This is what a directional difference (a probe, a jvp) takes.

    At s = 0 it is f(x), which the flat function already has. Every other point is evaluated once
    per line (a ``prefetch``'s points in one batched call) and shared through the memo under the
    line's number and s (``EvaluationMemo.line_number``): keying each point by its bytes, as
    ``StencilEvaluator`` does, would copy and hash every 100k-element point of a network's
    parameters and keep it in the memo, which cost more than evaluating f there. The points are the
    ones ``StencilEvaluator`` would be given, x + (s·scale)·direction, bit for bit.
    """

    def __init__(self, evaluator: StencilEvaluator, direction: np.ndarray, scale: float):
        self._evaluator = evaluator
        self._direction = np.ascontiguousarray(direction, dtype=np.float64)
        self._scale = float(scale)
        self._known: dict[bytes, np.ndarray] = {}
        self._prefix: bytes | None = None

    def __call__(self, s: np.ndarray) -> np.ndarray:
        steps = np.ascontiguousarray(s, dtype=np.float64).reshape(-1)
        self.prefetch(steps)
        if not len(steps):
            return np.empty((0, self._evaluator.g.y0.size))
        return np.stack([self._known[step.tobytes()] for step in steps])

    def prefetch(self, steps: np.ndarray) -> None:
        """Evaluate g at the steps s not known yet, all in one call."""
        g, memo, function = self._evaluator.g, self._evaluator._memo, self._evaluator._function
        pending: dict[bytes, float] = {}
        for step in np.ascontiguousarray(steps, dtype=np.float64).reshape(-1):
            key = step.tobytes()
            if key in self._known or key in pending:
                continue
            if key == _ZERO:  # x itself: f(x), which the flat function has
                known: np.ndarray | None = g.y0
                if memo is not None:
                    memo.served_at_x()
            else:
                known = memo.lookup(function, self._memo_key(key)) if memo is not None else None
            if known is not None:
                self._known[key] = known
            else:
                pending[key] = float(step)
        if not pending:
            return
        coefficients = np.array(list(pending.values())) * self._scale
        for key, value in zip(pending, self._evaluator.evaluate_line(self._direction, coefficients)):
            self._known[key] = value
            if memo is not None:
                memo.store(function, self._memo_key(key), value.copy())

    def _memo_key(self, step: bytes) -> bytes:
        if self._prefix is None:
            memo = self._evaluator._memo
            assert memo is not None  # keys are made for the memo only
            number = memo.line_number(self._evaluator._function, self._evaluator.g.token, self._scale, self._direction)
            self._prefix = b"line" + number.to_bytes(8, "little")
        return self._prefix + step


_ZERO = np.float64(0.0).tobytes()
