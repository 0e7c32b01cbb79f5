"""The declarative record of one derivative check: what to differentiate, where, and how strictly."""
from __future__ import annotations

import dataclasses
import hashlib
import inspect
import itertools
import sys
import types
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import optree

from gradci.scenarios.authoring import wrt as positional
from gradci.scenarios.authoring.expectations import expectations
from gradci.scenarios.authoring.fingerprints import fingerprint_of
from gradci.scenarios.authoring.modules import CapturedModules, ModuleAsInput, is_module
from gradci.scenarios.contract.cell import DIFFERENTIATING, FRAMEWORKS
from gradci.scenarios.contract.errors import ScenarioInputError
from gradci.scenarios.contract.requirements import requirements_of
from gradci.scenarios.numerics.complex_parts import ComplexParts, is_complex, tree_as_pairs
from gradci.scenarios.numerics.inputs import describe, differentiable, held_fixed, on_host
from gradci.scenarios.numerics.precision import precision_setting
from gradci.scenarios.numerics.shapes import shape_mismatch
from gradci.scenarios.numerics.sparsity import declared_pattern
from gradci.scenarios.operators.records import OPERATOR_RECORDS, operator_input

# Keys of scenarios whose function could not be fingerprinted whole: one each, never shared.
_UNSHARED = itertools.count()


def _caller_outside(this_file: str) -> tuple[str, int] | None:
    """The frame where ``Scenario(...)`` was called.

    It is the first frame above the constructor that is neither this module, nor generated code (the
    dataclass's ``__init__``), nor ``dataclasses.replace``.
    """
    frame: types.FrameType | None = sys._getframe(1)
    passed_over = (this_file, dataclasses.__file__)  # dataclasses.replace makes variants of a scenario
    while frame is not None and (frame.f_code.co_filename in passed_over or frame.f_code.co_filename.startswith("<")):
        frame = frame.f_back
    return (frame.f_code.co_filename, frame.f_lineno) if frame is not None else None


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


@dataclasses.dataclass(eq=False)
class Scenario:
    """One function, one operator, one input point.

    ``f`` is either one callable written against the array-API namespace of its input
    (numpy, torch and jax all run it) or a dict ``{"numpy"|"torch"|"jax": callable}`` with
    the same signature ``f(x, *contexts)`` in every framework.

    ``x``, ``tangent`` and ``contexts`` may hold numpy arrays, torch tensors, jax arrays, Python
    numbers, and tuples, lists and dicts of them (``gradci.scenarios.numerics.inputs``); all are kept as numpy, once.
    x and tangents must be floating point. In contexts only floating-point leaves are cast to each
    cell's dtype; integers, booleans, index arrays (handed to f as the framework's integer arrays),
    strings and None reach f unchanged.

    ``jacobian`` and ``hessian`` of pytrees follow ``jax.jacrev``'s block convention
    (``gradci.scenarios.operators.blocks``): the Jacobian is a pytree like f(x) whose leaves are pytrees like x, block
    [y_i][x_j] of shape ``y_i.shape + x_j.shape``; the Hessian is x-structure over x-structure, block
    [x_i][x_j] of shape ``x_i.shape + x_j.shape``. For a single array x that is the one array of shape
    ``f(x).shape + x.shape`` (``x.shape * 2``).

    ``wrt`` differentiates a function of several positional arguments with respect to some of them
    (``gradci.scenarios.authoring.wrt``): with ``x=(a, b, c)`` and ``wrt=(0, 2)`` (a tuple of positions) the scenario
    checks ``f(a, b, c, *contexts)`` as a function of the tuple ``(a, c)``, b held fixed like a
    context; ``wrt=1`` (one position) as a function of b alone, the result shaped like b. It is applied
    at construction: afterwards ``x`` holds the differentiated arguments (a tangent is given like
    them), the held ones follow the contexts, and ``f`` puts every argument back in its place. A
    callable ``reference`` is then called with every argument too: ``reference(a, b, c, *contexts)``,
    or ``reference(a, b, c, tangent, *contexts)``.

    ``state`` names contexts (by position) that ``f`` updates in place, such as a batch norm's
    running statistics: each evaluation gets a fresh copy of their declared value, so the derivative
    is checked at the declared point and the update is not mistaken for a bug.

    ``xfail`` and ``skip`` declare cells known to fail, or not to be run, by backend, device and dtype
    patterns, with the reason (and for ``xfail`` optionally the exception expected): see
    ``gradci.scenarios.authoring.expectations``.

    ``requirements`` (``{"min_memory": "16GB", "min_capability": "80"}``) sends the scenario's CUDA
    cells only to devices that offer them (``gradci.scenarios.contract.requirements``); ``precision`` pins the
    arithmetic its cells run with (``gradci.scenarios.numerics.precision``); ``repeats=N`` computes each derivative N
    times and records whether the results were bitwise identical (``Cell.repeat_spread``).

    ``second_point`` is another x (structured like x, each array as large or smaller) that every
    cell's prepared program also runs at, between x and x again, each result against its own
    reference: a point in another branch of f, or a smaller input after preparing at the larger (a
    compiled backend's cells draw one near x where none is declared).
    A compiled cell (jax-rev-jit, jax-fwd) that traces or compiles again when called again at the same
    shapes fails, with the count; ``retraces=True`` declares that expected, and the cell warns instead.
    ``sparsity`` declares where a ``jacobian``'s or ``hessian``'s entries may be nonzero, for a single
    array x: a boolean array shaped like the result (``f(x).shape + x.shape``, ``x.shape * 2``) or
    its matrix (one row per element of f(x), one column per element of x). Every cell fails on a
    nonzero outside it, naming the entry; a reference that contradicts it is the scenario's error.

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
    xfail: Any = ()      # scenarios.expectations: which cells are known to fail, and why
    skip: Any = ()       # ... and which are not run at all
    tags: tuple[str, ...] = ()
    state: tuple[int, ...] = ()
    # The device side (scenarios.requirements, scenarios.precision): what a GPU must offer to run
    # the cells, the arithmetic precision they pin (None: the frameworks' defaults, recorded), and how
    # many times each cell's derivative is computed to see whether it is bitwise reproducible.
    requirements: Any = None
    precision: str | None = None
    repeats: int = 1
    # Another x to run each cell's prepared program at, after x and before x again (None: compiled
    # backends draw one near x; see gradci.scenarios.reference.second_point).
    second_point: Any = None
    # Whether its compiled cells (jax-rev-jit, jax-fwd) may trace or compile again on a later call at
    # the same shapes: a warning on the cell instead of a failure.
    retraces: bool = False
    # A jacobian's or hessian's sparsity pattern (gradci.scenarios.numerics.sparsity): every cell's
    # result must be 0 outside it, and the reference must not contradict it.
    sparsity: Any = None
    # Set by gradci, not by authors: which leaves of x were complex (``gradci.scenarios.numerics.complex_parts``),
    # x then holding them as (real, imaginary) pairs. None: x is real.
    complex_parts: ComplexParts | None = None
    wrt: dataclasses.InitVar[int | tuple[int, ...] | None] = None

    def __post_init__(self, wrt: int | tuple[int, ...] | None) -> None:
        self.__dict__["_defined_at"] = _caller_outside(__file__)
        if self.operator not in OPERATOR_RECORDS:
            raise ScenarioInputError(f"scenario {self.name!r}: unknown operator {self.operator!r}; "
                                     f"expected one of {', '.join(OPERATOR_RECORDS)}")
        self._check_implementations()
        self._models = self._take_models()
        if not isinstance(self.contexts, (tuple, list)):
            raise ScenarioInputError(f"scenario {self.name!r}: contexts must be a tuple of f's arguments after x; "
                                     f"got {describe(self.contexts)}")
        self.contexts = tuple(held_fixed(c) for c in self.contexts)
        self.dtypes = tuple(self.dtypes)
        self.tags = tuple(self.tags)
        self.state = tuple(self.state)
        self.xfail = expectations(self.xfail, "xfail", self.name)
        self.skip = expectations(self.skip, "skip", self.name)
        self.requirements = requirements_of(self.requirements, self.name)
        self.precision = precision_setting(self.precision, self.name)
        if type(self.repeats) is not int or self.repeats < 1:
            raise ScenarioInputError(f"scenario {self.name!r}: repeats must be a whole number of at least 1 "
                                     f"(2 or more checks bitwise reproducibility); got {self.repeats!r}")
        if not isinstance(self.retraces, bool):
            raise ScenarioInputError(f"scenario {self.name!r}: retraces must be True or False; got {self.retraces!r}")
        wrong = [i for i in self.state if not (isinstance(i, int) and 0 <= i < len(self.contexts))]
        if wrong:
            raise ScenarioInputError(f"scenario {self.name!r}: state={self.state} names contexts by position; "
                                     f"{wrong} is not one of 0..{len(self.contexts) - 1}")
        if wrt is not None:
            self._hold_fixed_all_but(wrt)
        else:
            self._hint_wrt()
        taken_apart = self._take_complex_apart()
        self.x = operator_input(self.operator, self.x, self.name)
        if self.second_point is not None:
            self.second_point = self._checked_second_point(tree_as_pairs(_on_host(self.second_point)))
        self.sparsity = declared_pattern(self.sparsity, self.operator, self.x, self.name)
        like = "x" if OPERATOR_RECORDS[self.operator].takes_tangent else "f(x)"
        needs = f"{self.operator} needs the tangent to be float arrays shaped like {like}"
        if self.complex_parts is not None:
            needs += " (complex where it is complex)"
        if taken_apart is not None and OPERATOR_RECORDS[self.operator].takes_tangent:  # given by the author
            self.tangent = map_tangents(lambda t: taken_apart.tangent_like_x(_on_host(t)), self.tangent)
        if OPERATOR_RECORDS[self.operator].takes_cotangent and self.tangent is not None:
            batch = self.tangent if isinstance(self.tangent, Tangents) else [self.tangent]
            self.__dict__["_complex_cotangent"] = [tuple(is_complex(leaf) for leaf in optree.tree_leaves(
                _on_host(t), none_is_leaf=True)) for t in batch]
        self.tangent = map_tangents(lambda t: differentiable(tree_as_pairs(_on_host(t)), "tangent", needs, self.name),
                                    self.tangent)
        if OPERATOR_RECORDS[self.operator].takes_tangent and self.tangent is not None:
            self._check_tangent_shapes()
        if self._models:  # fingerprinted now, before per-dtype copies of the models exist
            self._read_code()

    def cotangent_given_complex(self) -> list[tuple[bool, ...]] | None:
        """Per cotangent given (one, or each of a batch), which of its leaves were complex; None: unknown.

        They are kept as pairs since, like complex x; a real one given for a complex output of f is read as
        t + 0i once f(x) is known (``gradci.scenarios.reference.finite_differences.default_tangent``).
        """
        return self.__dict__.get("_complex_cotangent")

    def _check_tangent_shapes(self) -> None:
        """Refuse a tangent that is not shaped like x, naming the shape it must have.

        A cotangent is shaped like f(x), known only once f runs: the reference checks it
        (``gradci.scenarios.reference.finite_differences.default_tangent``).
        """
        batch = list(self.tangent) if isinstance(self.tangent, Tangents) else [self.tangent]
        mask = self.complex_parts.mask if self.complex_parts is not None else None
        for index, tangent in enumerate(batch):
            mismatch = shape_mismatch(tangent, self.x, mask)
            if mismatch is not None:
                which = f"tangent {index} of the batch" if isinstance(self.tangent, Tangents) else "the tangent"
                raise ScenarioInputError(f"scenario {self.name!r}: {self.operator} needs {which} shaped like x "
                                         f"(each leaf as x's, in x's structure): {mismatch}")

    def _take_complex_apart(self) -> ComplexParts | None:
        """Keep complex leaves of x as (real, imaginary) pairs, and note which they were; the note, if now.

        A scenario made again from one whose x is already pairs (``dataclasses.replace``) keeps its note
        (None is returned: its tangent is pairs already).
        """
        mask = tuple(is_complex(leaf) for leaf in optree.tree_leaves(self.x, none_is_leaf=True))
        if not any(mask):
            return None
        if self.operator not in COMPLEX_OPERATORS:
            raise ScenarioInputError(
                f"scenario {self.name!r}: x is complex, and gradci checks complex x for "
                f"{', '.join(COMPLEX_OPERATORS)}, not {self.operator} (second order on complex x is not checked "
                f"yet): write f as a real function of (x.real, x.imag) to check its {self.operator}")
        declared = [name for name, value in (("reference", self.reference), ("sparsity", self.sparsity))
                    if value is not None]
        if declared:
            raise ScenarioInputError(
                f"scenario {self.name!r}: x is complex, and {' and '.join(declared)} for complex x is not "
                f"supported yet (it would be read as (real, imaginary) pairs): leave it out; the finite-difference "
                f"reference over (Re z, Im z) serves complex x")
        self.x, self.complex_parts = tree_as_pairs(_on_host(self.x)), ComplexParts(mask)
        return self.complex_parts

    def _checked_second_point(self, point: Any) -> Any:
        """``second_point`` as float64 arrays, refused unless it is x's structure, no leaf larger than x's."""
        point = operator_input(self.operator, point, f"{self.name}: second_point")
        (leaves, spec), (x_leaves, x_spec) = (optree.tree_flatten(tree, none_is_leaf=True) for tree in (point, self.x))
        larger = spec != x_spec or any(p.ndim != a.ndim or any(m > n for m, n in zip(p.shape, a.shape))
                                       for p, a in zip(leaves, x_leaves))
        if larger:
            raise ScenarioInputError(f"scenario {self.name!r}: second_point must be structured like x, each "
                                     f"array of x's shape or smaller (another point, or a smaller input); "
                                     f"got {describe(point)} for x {describe(self.x)}")
        return point

    def _take_models(self) -> dict[str, CapturedModules]:
        """Turn a module given as x into its parameters, and note the torch modules f captures.

        See ``gradci.scenarios.authoring.modules``. The captured modules are copied per cell dtype.
        """
        if is_module(self.x):
            try:
                given = ModuleAsInput(self.x)
            except ValueError as exc:
                raise ScenarioInputError(f"scenario {self.name!r}: x is a module, but {exc}") from None
            loss = self.f.get(given.framework) if isinstance(self.f, Mapping) else self.f
            if loss is None:
                raise ScenarioInputError(f"scenario {self.name!r}: x is a {given.framework} module, and f has no "
                                         f"{given.framework} implementation to call on it")
            self.x, self.f = given.parameters, {given.framework: given.bind(loss)}
        implementations = self.f.items() if isinstance(self.f, Mapping) else [("any", self.f)]
        return {key: CapturedModules(fn) for key, fn in implementations
                if isinstance(fn, types.FunctionType) and CapturedModules.found_in(fn)}

    def _hint_wrt(self) -> None:
        """Refuse a tuple x handed to a function of several positional arguments without ``wrt``.

        f would get the tuple as its first argument and too few others, deep inside a cell. Say so here.
        """
        if not isinstance(self.x, tuple) or len(self.x) < 2:
            return
        implementations = self.f.values() if isinstance(self.f, Mapping) else [self.f]
        for fn in implementations:
            needed = _required_positional(fn)
            if needed is not None and needed > 1 + len(self.contexts):
                raise ScenarioInputError(
                    f"scenario {self.name!r}: x is a tuple of {len(self.x)} and f takes {needed} positional "
                    f"arguments: pass wrt={tuple(range(len(self.x)))} to differentiate f(*x) with respect to "
                    f"each argument (or give f one argument that takes the tuple)")

    def _check_implementations(self) -> None:
        implementations = self.f if isinstance(self.f, Mapping) else {None: self.f}
        unknown = sorted(name for name in set(implementations) - {*FRAMEWORKS} if name is not None)
        if unknown:
            raise ScenarioInputError(f"scenario {self.name!r}: f has unknown framework keys {unknown}; "
                                     f"expected some of {', '.join(FRAMEWORKS)}")
        for key, fn in implementations.items():
            if not callable(fn):
                where = "f" if key is None else f"f[{key!r}]"
                raise TypeError(f"scenario {self.name!r}: {where} must be a callable (or f a dict of callables "
                                f"by framework); got {describe(fn)}")

    def _hold_fixed_all_but(self, wrt: int | tuple[int, ...]) -> None:
        """Apply ``wrt`` (see ``gradci.scenarios.authoring.wrt``).

        x becomes the differentiated arguments, the held ones follow the contexts, and f and a callable
        reference take them back in their places.
        """
        positions = positional.chosen_positions(wrt, self.x, self.name)
        count = len(self.x)
        self.x, held = positional.split(wrt, self.x, positions)
        self.contexts += tuple(held_fixed(arg) for arg in held)

        def regroup(fn):
            return positional.regrouped(fn, wrt, positions, count)

        self.f = ({key: regroup(fn) for key, fn in self.f.items()} if isinstance(self.f, Mapping)
                  else regroup(self.f))
        if callable(self.reference):
            self.reference = regroup(self.reference)

    def implementation_missing(self, framework: str) -> bool:
        """Whether f is given per framework and not for ``framework``."""
        return isinstance(self.f, Mapping) and self.f.get(framework) is None

    def lacked_frameworks(self) -> tuple[str, ...]:
        """The differentiating frameworks f is not given for.

        Their backends get no cells of this scenario (not listed as skipped, only counted), as a
        torch-only rule has nothing to say to jax.
        """
        return tuple(framework for framework in DIFFERENTIATING if self.implementation_missing(framework))

    def defined_at(self) -> tuple[str, int] | None:
        """The file and line of the ``Scenario(...)`` call that made it.

        A check run's annotation points there. None where no Python frame made it.
        """
        return self.__dict__.get("_defined_at")

    def import_ms(self) -> float | None:
        """How long its module took to import (None: not loaded from a gradci.toml module)."""
        return self.__dict__.get("_import_ms")

    def module_state(self) -> tuple[dict[str, Any] | None, list[str]]:
        """The framework state the scenario's module left at import, and the changes it made then.

        The state is None where the scenario was not loaded from a module. See
        ``gradci.scenarios.adapters.global_state``.
        """
        return self.__dict__.get("_module_state", (None, []))

    def implementation(self, framework: str, dtype: str = "float64", device: str = "cpu") -> Callable | None:
        """The callable for ``framework``, with the models it holds in ``dtype`` on ``device``.

        None when the scenario gives none. ``device`` is the execution device. The callable is made now,
        outside any transform.
        """
        key = framework if isinstance(self.f, Mapping) else "any"
        fn = self.f.get(framework) if isinstance(self.f, Mapping) else self.f
        if fn is None:
            return None
        prepare = getattr(fn, "prepare", None)
        if prepare is not None:  # a module given as x: its copy for this dtype and device
            prepare(dtype, device)
        captured = self._models.get(key) if "_models" in self.__dict__ else None
        return captured.for_cell(dtype, device) if captured else fn

    def fingerprint(self) -> str:
        """A stable hash of everything that decides the reference: code, inputs, operator.

        Computed once: a scenario is a record, not to be changed after it is made (hashing a large
        parameter pytree and reading source files is not free)."""
        return self._once("_fingerprint", self._compute_fingerprint)

    def _compute_fingerprint(self) -> str:
        digest = hashlib.sha256()
        digest.update(f"{self.name}\0{self.operator}\0{self._code_fingerprint()}".encode())
        _hash_complex_parts(digest, self.complex_parts)
        if callable(self.reference):
            digest.update(fingerprint_of(self.reference)[0].encode())
        given = None if callable(self.reference) else self.reference
        whole = [_hash_tree(digest, part) for part in (self.x, self.tangent, self.contexts, given)]
        self.__dict__["_inputs_read"] = all(whole)
        return digest.hexdigest()[:20]

    def cache_key(self) -> str:
        """The key under which this scenario's reference is shared.

        Its fingerprint, or, where the fingerprint could not read everything its function reads, a key
        of its own.
        """
        shared = self._code_fully_read() and self._inputs_fully_read()
        return self.fingerprint() if shared else f"{self.fingerprint()}/{self._unshared_token()}"

    def _inputs_fully_read(self) -> bool:
        """Whether every leaf of x, the tangent, the contexts and the reference could be hashed whole."""
        self.fingerprint()
        return self.__dict__["_inputs_read"]

    def _code_fingerprint(self) -> str:
        return self._read_code()[0]

    def _code_fully_read(self) -> bool:
        return self._read_code()[1]

    def _read_code(self) -> tuple[str, bool]:
        """(digest, complete) of everything the implementations read (``fingerprints``), once."""
        if "_code_read" not in self.__dict__:
            implementations = self.f.items() if isinstance(self.f, Mapping) else [("any", self.f)]
            self.__dict__["_code_read"] = fingerprint_of(sorted(implementations, key=lambda kv: kv[0]))
        return self.__dict__["_code_read"]

    def _unshared_token(self) -> str:
        return self._once("_token", lambda: f"unshared-{next(_UNSHARED)}")

    def function_fingerprint(self) -> str:
        """A hash of what decides f's value at a given point.

        Its code, contexts, state and x's structure, not the operator, the point or the name. Scenarios
        sharing it (one function under several operators) can share f's evaluations. Computed once, as
        ``fingerprint``.
        """
        return self._once("_function_fingerprint", self._compute_function_fingerprint)

    def point_fingerprint(self) -> str:
        """A hash of x alone, its structure and values.

        With ``function_fingerprint``, it tells which point of which function. Computed once, as
        ``fingerprint``.
        """
        return self._once("_point_fingerprint", self._compute_point_fingerprint)

    def _compute_point_fingerprint(self) -> str:
        digest = hashlib.sha256()
        if not _hash_tree(digest, self.x):  # a leaf that could not be read whole: never shared
            digest.update(self._unshared_token().encode())
        return digest.hexdigest()[:20]

    def _once(self, key: str, compute: Callable[[], str]) -> str:
        if key not in self.__dict__:
            self.__dict__[key] = compute()
        return self.__dict__[key]

    def _compute_function_fingerprint(self) -> str:
        digest = hashlib.sha256()
        digest.update(self._code_fingerprint().encode())
        leaves, spec = optree.tree_flatten(self.x, none_is_leaf=True)
        digest.update(f"{spec}{[np.shape(leaf) for leaf in leaves]}{self.state}".encode())
        _hash_complex_parts(digest, self.complex_parts)
        contexts_whole = _hash_tree(digest, self.contexts)
        if not (self._code_fully_read() and contexts_whole):  # something could not be hashed: never shared
            digest.update(self._unshared_token().encode())
        return digest.hexdigest()[:20]



# The operators checked on complex x (the first-order ones of any x: see numerics.complex_conventions).
COMPLEX_OPERATORS = ("gradient", "value_and_gradient", "jacobian", "jvp", "vjp")


def _on_host(tree: Any) -> Any:
    return optree.tree_map(on_host, tree, none_is_leaf=True)


def _hash_complex_parts(digest, parts: ComplexParts | None) -> None:
    """Tell a complex x kept as pairs from a real x of the same numbers (nothing for a real x)."""
    if parts is not None:
        digest.update(f"\0complex{parts.mask}".encode())


# Leaves whose repr is exact and complete: hashed by it. Any other leaf by everything it holds.
_PLAIN = (bool, int, float, complex, str, bytes, type(None))


def _hash_tree(digest, tree: Any) -> bool:
    """Hash a pytree's structure and its leaves, and say whether every leaf was read whole.

    Arrays are hashed by shape and content, plain values by repr, any other object by everything it
    holds (``fingerprints``).
    """
    leaves, spec = optree.tree_flatten(tree, none_is_leaf=True)
    digest.update(str(spec).encode())
    whole = True
    for leaf in leaves:
        if isinstance(leaf, np.ndarray):
            # float64 (every x, every float context) by shape alone, as before index arrays existed
            kind = "" if leaf.dtype == np.float64 else str(leaf.dtype)
            digest.update(f"{kind}{leaf.shape}".encode())
            digest.update(np.ascontiguousarray(leaf).tobytes())
        elif isinstance(leaf, _PLAIN):
            digest.update(f"{type(leaf).__name__}:{leaf!r}".encode())
        else:  # an object's repr may leave out what decides f (a config whose repr names its class only)
            text, complete = fingerprint_of(leaf)
            digest.update(text.encode())
            whole = whole and complete
    return whole


def _required_positional(fn: Callable) -> int | None:
    """How many positional arguments ``fn`` requires.

    None where its signature cannot be read or it takes ``*args``.
    """
    try:
        parameters = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return None
    if any(p.kind is p.VAR_POSITIONAL for p in parameters):
        return None
    return sum(1 for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty)
