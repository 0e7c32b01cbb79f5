"""The scenario's function as a float64 numpy function of one flat vector: what finite differences need."""
from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import numpy as np
import optree

from gradci.scenarios.authoring.scenario import Scenario
from gradci.scenarios.operators.records import OPERATOR_RECORDS


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


def owned_copy(tree: Any) -> Any:
    """Every numpy array of ``tree`` as a C-contiguous copy nobody else holds.

    A function may write into its arguments, or read raw storage (``as_strided``) past a view's
    edges; given views of a stencil's points or the scenario's own arrays, it would then change them
    or read its neighbours' values."""
    return optree.tree_map(lambda leaf: np.array(leaf, order="C", copy=True) if isinstance(leaf, np.ndarray)
                           else leaf, tree, none_is_leaf=True)


def float64_callable(scenario: Scenario, adopting: bool = False, complex_outputs: list[bool] | None = None) -> Callable:
    """f(x, *contexts) on numpy float64 pytrees, from whichever implementation can run on the CPU.

    Every call gets arrays of its own (the framework's conversion copies; numpy's gets copies).
    ``adopting``: x's arrays are the call's own already (made for it, held by nobody else), handed
    over without another copy where the framework can share their memory.

    Prefer the numpy (or framework-neutral) implementation; fall back to torch, then jax, on the CPU in
    float64, so that every framework is held to the same reference. ``complex_outputs``: see
    ``reference_implementation``.
    """
    framework = reference_framework(scenario)
    fn = reference_implementation(scenario, framework, complex_outputs)
    if framework == "numpy":
        own_x = (lambda x: x) if adopting else owned_copy
        return lambda x, *contexts: fn(own_x(x), *owned_copy(contexts))
    from gradci.scenarios.adapters import get_framework

    fw = get_framework(framework)
    convert_x = fw.adopt if adopting else (lambda x: fw.to_framework(x, "float64", "cpu"))

    def through_framework(x, *contexts):
        args = [convert_x(x)] + [fw.to_framework(tree, "float64", "cpu") for tree in contexts]
        return fw.to_numpy(fn(*args))

    return through_framework


def reference_implementation(scenario: Scenario, framework: str,
                             complex_outputs: list[bool] | None = None) -> Callable:
    """The scenario's f for ``framework`` as the reference differentiates it: a real function.

    Where x is complex, x's complex leaves come in as (real, imaginary) pairs and f's complex outputs go
    out as pairs (``gradci.scenarios.numerics.complex_parts``), ``complex_outputs`` (where given) set to
    which of them were complex at each call; otherwise f itself.
    """
    fn = scenario.implementation(framework)
    assert fn is not None, "reference_framework picks a framework the scenario implements"
    return fn if scenario.complex_parts is None else scenario.complex_parts.over_pairs(fn, complex_outputs)


def reference_framework(scenario: Scenario) -> str:
    """The framework whose implementation computes references.

    numpy (or a framework-neutral f) first, then torch, then jax.
    """
    for framework in ("numpy", "torch", "jax"):
        if scenario.implementation(framework) is not None:
            return framework
    raise ValueError(f"scenario {scenario.name!r} has no implementation to compute a reference with")


# Tells flat functions apart for the evaluation memo's keys: never reused within a process (an
# object's id can be, once it is collected).
_TOKENS = itertools.count()


class FlatFunction:
    """g(v) = ravel(f(unravel(v), *contexts)) with the output's structure remembered.

    f(x) itself must succeed; at any other point an exception counts as a value outside f's domain:
    NaN, which makes finite differences take smaller or one-sided steps (torch's binary cross-entropy
    raises for inputs outside [0, 1] where log would return NaN)."""

    def __init__(self, scenario: Scenario):
        self.token = next(_TOKENS)  # this function at this x: what the memo's keys of lines through x name
        # Which leaves of f(x) were complex (kept as pairs): what a real cotangent of them is read by.
        self.complex_outputs: list[bool] = []
        self._fn = float64_callable(scenario, complex_outputs=self.complex_outputs)
        self._adopting_fn = float64_callable(scenario, adopting=True)
        self._contexts = scenario.contexts
        self.v0, self.unravel_input = ravel(scenario.x)
        leaves, self._spec = optree.tree_flatten(self.unravel_input(self.v0), none_is_leaf=True)
        stops = np.cumsum([leaf.size for leaf in leaves], dtype=int)
        self._spans = [((int(stop) - leaf.size, int(stop)), leaf.shape) for leaf, stop in zip(leaves, stops)]
        self.value = self._call_tree(scenario.x)
        self.y0, self.unravel_output = ravel(self.value)
        self.check_output(scenario.operator)
        self.evaluations = 0
        self.failure: Exception | None = None  # the last exception at a stencil point, for the message

    def check_output(self, operator: str) -> None:
        """Raise ScenarioOutputError when f(x) is not what ``operator`` differentiates.

        One FlatFunction may serve the scenarios of several operators.
        """
        _check_output(operator, self.value, self.y0)

    def _call_tree(self, x: Any, adopting: bool = False) -> Any:
        out = (self._adopting_fn if adopting else self._fn)(x, *self._contexts)
        return optree.tree_map(_float_array, out, none_is_leaf=True)

    def __call__(self, v: np.ndarray) -> np.ndarray:
        return self._outside_domain_as_nan(lambda: self._call_tree(self.unravel_input(v)))

    def along(self, direction: np.ndarray, coefficient: float) -> np.ndarray:
        """g(v0 + coefficient·direction), with the point built just before f reads it.

        The point is built leaf by leaf in arrays of its own with ``line_rows``' arithmetic (a product,
        then a sum: the same roundings) and handed to f without another copy: each of a network's
        parameter arrays is made just before f reads it, while it is in cache, where building every
        point first and copying each into the framework cost 1.5×.
        """
        leaves = []
        for (start, stop), shape in self._spans:
            leaf = np.multiply(coefficient, direction[start:stop])
            leaf += self.v0[start:stop]
            leaves.append(leaf.reshape(shape))
        point = optree.tree_unflatten(self._spec, leaves)
        return self._outside_domain_as_nan(lambda: self._call_tree(point, adopting=True))

    def _outside_domain_as_nan(self, evaluate: Callable[[], Any]) -> np.ndarray:
        self.evaluations += 1
        try:
            return ravel(evaluate())[0]
        except Exception as exc:  # noqa: BLE001 - any exception: the point is outside f's domain
            self.failure = exc
            return np.full(self.y0.size, np.nan)


class ScenarioOutputError(ValueError):
    """f(x) is not what the scenario's operator differentiates: every backend's cell is an error."""


def _float_array(leaf: Any) -> np.ndarray:
    if np.iscomplexobj(leaf):  # complex x has its outputs made pairs before they get here
        raise ScenarioOutputError(f"f returns complex values ({np.asarray(leaf).dtype}) for a real x: gradci "
                                  f"compares complex outputs of complex x; give x as complex (x + 0j) to "
                                  f"differentiate over the complex plane, or return (f.real, f.imag)")
    try:
        return np.asarray(leaf, dtype=np.float64)
    except (TypeError, ValueError):
        raise ScenarioOutputError(f"f must return numbers, an array or a pytree of arrays; it returned "
                                  f"{type(leaf).__name__} {str(leaf)[:60]!r}") from None


def _check_output(operator: str, value: Any, flat: np.ndarray) -> None:
    if not np.all(np.isfinite(flat)):
        raise ScenarioOutputError(f"f(x) is not finite at the scenario's point (NaN or Inf at element "
                                  f"{int(np.argmin(np.isfinite(flat)))} of {flat.size}): no derivative to check there")
    if OPERATOR_RECORDS[operator].output == "scalar" and flat.size != 1:
        shape = np.shape(value) if isinstance(value, np.ndarray) else f"a pytree of {flat.size} numbers"
        raise ScenarioOutputError(f"{operator} needs f(x) to be a scalar; it returned shape {shape}")
