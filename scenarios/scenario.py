"""The declarative record of one derivative check: what to differentiate, where, and how strictly."""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import inspect
from typing import Any, Callable, Mapping

import numpy as np
import optree

from scenarios.cell import FRAMEWORKS
from scenarios.operators import OPERATOR_RECORDS, check_operator_input



class Tangents(tuple):
    """Several tangents (or cotangents) for one scenario: the operator is applied to each.

    Mirrors DifferentiationInterface's batched tangents; a result is a tuple of one result per tangent.
    """

    __slots__ = ()


def map_tangents(fn: Callable[[Any], Any], tangent: Any) -> Any:
    """Apply ``fn`` to a tangent, or to each of a batch of them; None stays None."""
    if tangent is None:
        return None
    if isinstance(tangent, Tangents):
        return Tangents(fn(t) for t in tangent)
    return fn(tangent)


def _tree_to_float64(tree: Any) -> Any:
    def convert(leaf):
        if isinstance(leaf, (np.ndarray, float, int, np.floating)) and not isinstance(leaf, bool):
            return np.asarray(leaf, dtype=np.float64)
        return leaf

    return optree.tree_map(convert, tree, none_is_leaf=True)


@dataclasses.dataclass(eq=False)
class Scenario:
    """One function, one operator, one input point.

    ``f`` is either one callable written against the array-API namespace of its input
    (numpy, torch and jax all run it) or a dict ``{"numpy"|"torch"|"jax": callable}`` with
    the same signature ``f(x, *contexts)`` in every framework.

    ``state`` names contexts (by position) that ``f`` updates in place, such as a batch norm's
    running statistics: each evaluation gets a fresh copy of their declared value, so the derivative
    is checked at the declared point and the update is not mistaken for a bug.

    ``reference`` replaces the finite-difference reference where differencing cannot be accurate
    enough: the exact result, or a function ``reference(x, *contexts)`` — ``reference(x, tangent,
    *contexts)`` for operators that take a tangent or cotangent — that computes it in numpy.
    """

    name: str
    operator: str
    f: Callable | Mapping[str, Callable]
    x: Any
    tangent: Any = None
    contexts: tuple = ()
    reference: Any = None
    rtol: float | None = None
    atol: float | None = None
    compare: Callable | None = None
    dtypes: tuple[str, ...] = ("float64", "float32")
    xfail: Mapping[str, str] = dataclasses.field(default_factory=dict)
    tags: tuple[str, ...] = ()
    state: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.operator not in OPERATOR_RECORDS:
            raise ValueError(f"scenario {self.name!r}: unknown operator {self.operator!r}; "
                             f"expected one of {', '.join(OPERATOR_RECORDS)}")
        if isinstance(self.f, Mapping):
            unknown = set(self.f) - set(FRAMEWORKS)
            if unknown:
                raise ValueError(f"scenario {self.name!r}: unknown framework keys {sorted(unknown)}")
        elif not callable(self.f):
            raise TypeError(f"scenario {self.name!r}: f must be callable or a dict of callables")
        self.x = _tree_to_float64(self.x)
        self.contexts = tuple(_tree_to_float64(c) for c in self.contexts)
        self.tangent = map_tangents(_tree_to_float64, self.tangent)
        self.dtypes = tuple(self.dtypes)
        self.tags = tuple(self.tags)
        self.state = tuple(self.state)
        wrong = [i for i in self.state if not (isinstance(i, int) and 0 <= i < len(self.contexts))]
        if wrong:
            raise ValueError(f"scenario {self.name!r}: state={self.state} names contexts by position; "
                             f"{wrong} is not one of 0..{len(self.contexts) - 1}")
        check_operator_input(self.operator, self.x, self.name)

    def implementation(self, framework: str) -> Callable | None:
        """The callable for ``framework``, or None when the scenario gives none."""
        if isinstance(self.f, Mapping):
            return self.f.get(framework)
        return self.f

    def fingerprint(self) -> str:
        """A stable hash of everything that decides the reference: code, inputs, operator.

        Computed once: a scenario is a record, not to be changed after it is made (hashing a large
        parameter pytree and reading source files is not free)."""
        cached = self.__dict__.get("_fingerprint")
        if cached is None:
            cached = self.__dict__["_fingerprint"] = self._compute_fingerprint()
        return cached

    def _compute_fingerprint(self) -> str:
        digest = hashlib.sha256()
        digest.update(f"{self.name}\0{self.operator}\0".encode())
        implementations = self.f.items() if isinstance(self.f, Mapping) else [("any", self.f)]
        for key, fn in sorted(implementations, key=lambda kv: kv[0]):
            digest.update(key.encode())
            _hash_code(digest, fn)
        if callable(self.reference):
            _hash_code(digest, self.reference)
        for part in (self.x, self.tangent, self.contexts, None if callable(self.reference) else self.reference):
            leaves, spec = optree.tree_flatten(part, none_is_leaf=True)
            digest.update(str(spec).encode())
            for leaf in leaves:
                if isinstance(leaf, np.ndarray):
                    digest.update(str(leaf.shape).encode())
                    digest.update(np.ascontiguousarray(leaf).tobytes())
                else:
                    digest.update(repr(leaf).encode())
        return digest.hexdigest()[:20]


def _hash_code(digest, obj: Any, depth: int = 0) -> None:
    """Hash what decides a function's values: its source, its defaults and what its closure captured
    (arrays by content, nested functions recursively), so that a closure over changed data, or over
    another function, changes the fingerprint."""
    if depth > 4:
        return
    if isinstance(obj, np.ndarray):
        digest.update(f"{obj.dtype}{obj.shape}".encode())
        digest.update(np.ascontiguousarray(obj).tobytes())
    elif obj is None or isinstance(obj, (bool, int, float, complex, str, bytes)):
        digest.update(repr(obj).encode())
    elif isinstance(obj, (list, tuple)):
        for item in obj:
            _hash_code(digest, item, depth + 1)
    elif isinstance(obj, dict):
        for key in sorted(obj, key=repr):
            digest.update(repr(key).encode())
            _hash_code(digest, obj[key], depth + 1)
    elif isinstance(obj, functools.partial):
        for part in (obj.func, obj.args, obj.keywords):
            _hash_code(digest, part, depth + 1)
    elif callable(obj):
        digest.update(_source_of(obj).encode())
        for part in (getattr(obj, "__defaults__", None), getattr(obj, "__kwdefaults__", None)):
            _hash_code(digest, part, depth + 1)
        for cell in getattr(obj, "__closure__", None) or ():
            try:
                _hash_code(digest, cell.cell_contents, depth + 1)
            except ValueError:  # an empty cell (a name not bound yet)
                pass
    else:
        digest.update(type(obj).__qualname__.encode())


def _source_of(fn: Callable) -> str:
    try:
        return inspect.getsource(fn)
    except (OSError, TypeError):
        return getattr(fn, "__qualname__", repr(type(fn)))
