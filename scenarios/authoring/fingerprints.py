"""Fingerprints of what a scenario's function reads, at any depth.

A fingerprint decides whether two scenarios may share a reference (the cache) and f's evaluations
(the memo): two closures with the same source over different weights must never share one, or a
correct backend fails against the other scenario's gradient. So everything a function reads is
hashed: its code, defaults, closure, the globals its code names, and whatever those hold —
containers, objects' attributes, bound methods' objects, framework modules' parameters, tensors by
content — followed to any depth (a reference back to an object being hashed is hashed as that
reference, so cycles end). The scenarios of one listing walk the same library: inside
``walks_shared`` they share what each object came to, so that each is walked once, not once per
scenario, with the fingerprints they would have alone.

What cannot be read (an object of a C type with no attributes to look at: an open file, a lock, a
foreign handle) makes the hash *incomplete*: it is still stable, but the scenario's function is
then never shared through the memo or the cache (``Scenario.cache_key``).

One handler per kind of object (``functools.singledispatch``); framework types are recognised by
their module, so that hashing imports no framework.
"""
from __future__ import annotations

import ast
import collections
import contextlib
import contextvars
import functools
import hashlib
import inspect
import linecache
import random
import sys
import types
import weakref
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

import numpy as np

_ATOMS = (type(None), bool, int, float, complex, str, bytes, range, type(Ellipsis))
_FRAMEWORKS = ("torch", "jax", "jaxlib", "numpy", "optree")
# Python's and the packages whose versions every cell's record holds (``affected.environment.PACKAGES``,
# gradci aside: the built-in scenarios' functions live in it): their code is named, not read. A new
# version of one is a new environment, which re-runs every cell; reading scipy's classes (torchdiffeq's
# scipy solver reaches them) was a third of a pull request's listing.
_ENVIRONMENT = frozenset(sys.stdlib_module_names) | {"builtins", *_FRAMEWORKS, "scipy", "ml_dtypes", "opt_einsum"}
_TUPLE_FIELD = type(collections.namedtuple("_Pair", "a b").a)  # type: ignore[attr-defined]  # a namedtuple's field accessor, read off a class mypy cannot see


class Hasher:
    """One fingerprint being computed: a walk of the objects read, each summed up on its own.

    Each object read is hashed into a digest of its own (a frame), and its parent reads that digest.
    An object met again while its walk is under way, or not yet summed up, is named by how many visits
    back it was (so cycles end, and two equal cycles hash equal). An object whose walk leaned on
    nothing visited before it has a summary that is the same wherever it is met from outside its
    cycles: it is kept in ``known`` and read from there the next time, by this walk or any other
    sharing ``known``, unless an object it shares a cycle with was visited and is not summed up yet
    (walking it again then gives another summary, and it is walked again). Its visits count as one,
    as a summary read from ``known`` does, so that what a fingerprint comes to never depends on what
    was walked before it.
    """

    def __init__(self, known: Known | None = None) -> None:
        self.known = known if known is not None else Known()
        self.frames = [_Frame(0)]  # the walk's root, then the objects being walked, innermost last
        self._visits = 0  # objects visited so far (an object summed up from its own walk counts once)
        self._visited: dict[int, int] = {}  # id -> visit number, of objects visited and not yet summed up
        self._order: list[int] = []  # those ids in the order visited

    @property
    def digest(self) -> Any:
        """The digest of the object being walked (the walk's own at its root)."""
        return self.frames[-1].digest

    @property
    def complete(self) -> bool:
        return self.frames[0].complete

    def text(self, value: str) -> None:
        self.digest.update(value.encode())
        self.digest.update(b"\0")

    def add(self, obj: Any) -> None:
        if isinstance(obj, _ATOMS):
            self.text(f"{type(obj).__name__}:{obj!r}")
            return
        frame, key = self.frames[-1], id(obj)
        known = self.known.summaries.get(key)
        if known is not None and not self._inside(known.cycle):
            self._visits += 1  # as many visits as walking it and summing it up counts
            self.text(f"<{known.digest}>")
            frame.complete &= known.complete
            return
        seen = self._visited.get(key)
        if seen is not None:
            self.text(f"<again {self._visits - seen}>")
            frame.low = min(frame.low, seen)
            return
        self._visits += 1
        self._visited[key] = self._visits
        self._order.append(key)
        self.known.alive.append(obj)  # while ``known`` lives, no other object takes this one's id
        walked = _Frame(self._visits)
        self.frames.append(walked)
        try:
            _hash(obj, self)
        except RecursionError:
            raise
        except Exception:  # noqa: BLE001 - a property that raises, a repr that fails: what it held is unknown
            self.unreadable(obj)
        self.frames.pop()
        summary = walked.digest.hexdigest()
        self.text(f"<{summary}>")
        frame.complete &= walked.complete
        if walked.low < walked.start:  # it leaned on an object visited before it: its summary is this walk's
            frame.low = min(frame.low, walked.low)
            return
        # What its walk visited and did not sum up leaned on it: those objects share a cycle with it. Met
        # again from inside that cycle (one of them being walked), it is walked again, as it would be alone.
        cycle = []
        while self._order and self._visited[self._order[-1]] >= walked.start:
            member = self._order.pop()
            del self._visited[member]
            if member != key:
                cycle.append(member)
        self.known.summaries[key] = Summary(summary, walked.complete, frozenset(cycle))
        self._visits = walked.start

    def _inside(self, cycle: frozenset[int]) -> bool:
        """Whether an object of ``cycle`` was visited and is not summed up yet (the smaller set is looked through)."""
        if len(cycle) <= len(self._visited):
            return any(member in self._visited for member in cycle)
        return any(visited in cycle for visited in self._visited)

    def unreadable(self, obj: Any) -> None:
        self.frames[-1].complete = False
        self.text(f"<unreadable {type(obj).__module__}.{type(obj).__qualname__}>")


class _Frame:
    """One object's walk: its digest, its first visit's number, the earliest visit it leaned on."""

    __slots__ = ("complete", "digest", "low", "start")

    def __init__(self, start: int) -> None:
        self.digest = hashlib.sha256()
        self.start = self.low = start
        self.complete = True


class Summary(NamedTuple):
    """What an object's walk came to, and the objects that share a cycle with it (by id)."""

    digest: str
    complete: bool
    cycle: frozenset[int]


class Known:
    """Summaries of objects whose walk leaned on nothing outside itself, by id, for walks to share.

    Valid while the objects do not change: the walks of one listing, not a process's lifetime.
    """

    def __init__(self) -> None:
        self.summaries: dict[int, Summary] = {}
        self.alive: list[Any] = []  # the objects walked, kept alive so that their ids stay theirs


_shared: contextvars.ContextVar[Known | None] = contextvars.ContextVar("gradci_fingerprints_shared", default=None)


@contextlib.contextmanager
def walks_shared() -> Iterator[None]:
    """Let the fingerprints computed inside share their walks' summaries.

    For one listing's scenarios, which walk the same library (a solver's classes and functions) each:
    nothing they read may change inside. A fingerprint is the same with sharing as without.
    """
    token = _shared.set(Known())
    try:
        yield
    finally:
        _shared.reset(token)


def fingerprint_of(*objects: Any) -> tuple[str, bool]:
    """(hex digest, complete) of ``objects`` together."""
    hasher = Hasher(_shared.get())
    try:
        for obj in objects:
            hasher.add(obj)
    except RecursionError:  # a structure deeper than Python's stack: read up to there
        hasher.frames[0].complete = False
    return hasher.frames[0].digest.hexdigest(), hasher.complete


@functools.singledispatch
def _hash(obj: Any, h: Hasher) -> None:
    """Hash an object of any other type.

    Framework arrays and modules by content, then any object by its type and its attributes
    (``__dict__`` and ``__slots__``), which may hold weights or settings.
    """
    kind = type(obj)
    module = kind.__module__ or ""
    framework = module.split(".")[0] in _FRAMEWORKS
    if framework and hasattr(obj, "__array__") and not isinstance(obj, type):
        _hash_array(_as_numpy(obj), h)  # a torch tensor (a Parameter too) or a jax array: by content
        return
    wrapped = getattr(obj, "__wrapped__", None)
    if wrapped is not None:  # jax.jit, custom_vjp, functools.wraps: the function they wrap, then their rules
        h.text(f"wrapper {module}.{kind.__qualname__}")
        h.add(wrapped)
    state = _attributes(obj)
    if state is None:
        if framework:  # a dtype, a device, a framework function: named by what it prints
            h.text(f"{module}.{kind.__qualname__}:{obj!r}")
            return
        if wrapped is not None:
            return
        if callable(obj):  # a builtin function, a ufunc, a C-implemented callable: named by its module
            h.text(f"callable {getattr(obj, '__module__', module)}.{getattr(obj, '__qualname__', repr(obj))}")
            return
        h.unreadable(obj)
        return
    h.text(f"object {module}.{kind.__qualname__}")
    h.add(kind)
    h.add(state)


def _attributes(obj: Any) -> dict[str, Any] | None:
    """An object's attributes (``__slots__`` and ``__dict__``) as one dict, or None where it has none."""
    found: dict[str, Any] = {}
    for kind in type(obj).__mro__:
        slots = getattr(kind, "__slots__", ())
        for slot in (slots,) if isinstance(slots, str) else slots:
            if slot not in ("__dict__", "__weakref__") and hasattr(obj, slot):
                found[slot] = getattr(obj, slot)
    attributes = getattr(obj, "__dict__", None)
    if isinstance(attributes, dict):
        found.update(attributes)
    elif not found:
        return None
    return found


def _hash_array(array: np.ndarray, h: Hasher) -> None:
    h.text(f"array {array.dtype}{array.shape}")
    h.digest.update(np.ascontiguousarray(array).tobytes())


@_hash.register
def _(obj: np.ndarray, h: Hasher) -> None:
    _hash_array(obj, h)


@_hash.register
def _(obj: np.generic, h: Hasher) -> None:
    h.text(f"numpy scalar {obj.dtype}:{obj!r}")


@_hash.register(list)
@_hash.register(tuple)
def _(obj: list | tuple, h: Hasher) -> None:
    h.text(f"{type(obj).__qualname__}[{len(obj)}]")
    if "fun_sourceinfo" in getattr(obj, "_fields", ()):
        # jax.jit's record of where its function was defined ("f at file.py:71"): a line added above the
        # function moves it without changing what it computes (its code is hashed on its own).
        obj = obj._replace(fun_sourceinfo="")  # type: ignore[union-attr]  # a namedtuple, as _fields says
    for item in obj:
        h.add(item)


@_hash.register(set)
@_hash.register(frozenset)
def _(obj: set | frozenset, h: Hasher) -> None:
    h.text(f"{type(obj).__qualname__}[{len(obj)}]")
    for item in sorted(obj, key=repr):
        h.add(item)


@_hash.register(dict)
@_hash.register(types.MappingProxyType)
def _(obj: dict | types.MappingProxyType, h: Hasher) -> None:
    h.text(f"{type(obj).__qualname__}[{len(obj)}]")
    for key in sorted(obj, key=repr):
        h.add(key)
        h.add(obj[key])


@_hash.register
def _(obj: functools.partial, h: Hasher) -> None:
    h.text("partial")
    for part in (obj.func, obj.args, obj.keywords):
        h.add(part)


@_hash.register
def _(obj: types.ModuleType, h: Hasher) -> None:
    # numpy, torch...: their version is the environment's business, not the scenario's
    h.text(f"module {obj.__name__}")


@_hash.register
def _(obj: types.MethodType, h: Hasher) -> None:
    h.text("method")
    h.add(obj.__func__)
    h.add(obj.__self__)


@_hash.register
def _(obj: types.FunctionType, h: Hasher) -> None:
    h.text(f"function {obj.__qualname__}")
    environment = _of_the_environment(obj)
    h.text(f"of {obj.__module__}" if environment else _source_of(obj))
    _hash_code_object(obj.__code__, h)
    h.add(obj.__defaults__)
    h.add(obj.__kwdefaults__)
    for cell in obj.__closure__ or ():
        try:
            h.add(cell.cell_contents)
        except ValueError:  # an empty cell (a name not bound yet)
            h.text("<empty cell>")
    if environment:
        # Python's or a framework's (a torch autograd.Function's apply, torch.func.grad's wrapper): its
        # globals are its module's registries and caches, which whatever ran earlier in the process
        # has changed (the pytree types an import registered). Read, they moved the fingerprint, and the
        # probe directions it seeds, with the order tests ran in. What it was handed is read above.
        return
    for name in sorted(_global_names(obj.__code__)):
        if name in obj.__globals__:
            h.text(f"global {name}")
            h.add(obj.__globals__[name])


@_hash.register
def _(obj: type, h: Hasher) -> None:
    h.text(f"class {obj.__module__}.{obj.__qualname__}")
    if obj.__module__.split(".")[0] in _ENVIRONMENT:
        return  # the environment's classes (Python's, the frameworks'): named, not read
    h.text(_source_of(obj))
    for name, value in sorted(vars(obj).items()):
        if not name.startswith(("__", "_abc_")):
            h.text(f"attribute {name}")
            h.add(value)


@_hash.register(staticmethod)
@_hash.register(classmethod)
def _(obj: staticmethod | classmethod, h: Hasher) -> None:
    h.text(type(obj).__name__)
    h.add(obj.__func__)


@_hash.register
def _(obj: property, h: Hasher) -> None:
    h.text("property")
    for accessor in (obj.fget, obj.fset, obj.fdel):
        h.add(accessor)


@_hash.register(types.MemberDescriptorType)
@_hash.register(types.GetSetDescriptorType)
@_hash.register(types.WrapperDescriptorType)
@_hash.register(types.MethodDescriptorType)
@_hash.register(_TUPLE_FIELD)
def _(obj: Any, h: Hasher) -> None:
    # A slot or a C method: its value is read off the object.
    h.text(f"descriptor {getattr(obj, '__qualname__', repr(obj))}")


@_hash.register
def _(obj: random.Random, h: Hasher) -> None:
    h.text("random generator")
    h.add(obj.getstate())


@_hash.register
def _(obj: np.random.RandomState, h: Hasher) -> None:
    h.text("numpy random state")
    h.add(obj.get_state(legacy=False))


@_hash.register
def _(obj: np.random.Generator, h: Hasher) -> None:
    h.text("numpy generator")
    h.add(obj.bit_generator.state)


def _hash_code_object(code: types.CodeType, h: Hasher) -> None:
    """Hash the compiled code and its constants.

    They hold what the source misses (a function made by exec, or code whose file changed after import).
    """
    h.digest.update(code.co_code)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            _hash_code_object(const, h)
        else:
            h.text(repr(const))


def _of_the_environment(fn: types.FunctionType) -> bool:
    """Whether ``fn``'s code lives in Python's or a framework's module.

    Its globals' module, not ``__module__``, which ``functools.wraps`` copies from the function wrapped.
    """
    return str(fn.__globals__.get("__name__") or "").split(".")[0] in _ENVIRONMENT


def _global_names(code: types.CodeType) -> set[str]:
    """The global (and builtin) names a function's code, nested functions included, may read."""
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _global_names(const)
    return names


def _as_numpy(array: Any) -> np.ndarray:
    if hasattr(array, "detach"):  # torch: off the autograd graph and the device first
        array = array.detach().cpu()
    return np.asarray(array)


def _source_of(obj: Callable | type) -> str:
    """``obj``'s source text (its name where there is none), read once per object in this process.

    Every scenario of a project walks the same library (a solver's classes and functions: over a hundred
    objects), and ``inspect`` finds a class's source by parsing its whole module again each time: a
    listing of 20 ODE scenarios spent 10 s there. An object's source does not change while it lives.
    """
    try:
        return _sources[obj]
    except (KeyError, TypeError):  # not read yet, or an object no weak reference can key
        pass
    try:
        source = _class_source(obj) if isinstance(obj, type) else inspect.getsource(obj)
    except (OSError, TypeError):
        source = getattr(obj, "__qualname__", repr(type(obj)))
    try:
        _sources[obj] = source
    except TypeError:
        pass
    return source


_sources: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()


def _class_source(cls: type) -> str:
    """A class's source, the very text ``inspect.getsource`` gives, with its module parsed once for all its classes.

    ``inspect`` parses a class's whole module to find where it starts, on every class: a listing that walks
    the classes of one library module (torch.nn's) parsed it once per class, most of its time. Where the
    shortcut is unsure of giving inspect's answer, inspect answers (and raises as it does).
    """
    try:
        found = _class_start(cls)
    except Exception:  # noqa: BLE001 - whatever the shortcut trips on, inspect's own path decides
        found = None
    if found is None:
        return inspect.getsource(cls)
    lines, start = found
    return "".join(inspect.getblock(lines[start:]))  # where the block ends, as inspect finds it


def _class_start(cls: type) -> tuple[list[str], int] | None:
    """The lines of ``cls``'s module and the index of its first line (its first decorator's), as inspect reads them.

    None where inspect might read something else: a class it would unwrap, a file it cannot name, a
    qualified name not found or found twice in the module (inspect takes the first; the object may be
    the other).
    """
    if hasattr(cls, "__wrapped__"):  # inspect reads what ``__wrapped__`` leads to, not the class
        return None
    file = inspect.getsourcefile(cls)
    if not file:
        return None
    linecache.checkcache(file)  # as inspect does: a file edited since it was read is read again
    module = sys.modules.get(cls.__module__)
    lines = linecache.getlines(file, module.__dict__ if module else None)
    if not lines:
        return None
    start = _class_starts(file, "".join(lines)).get(cls.__qualname__)
    return None if start is None else (lines, start)


@functools.lru_cache(maxsize=64)
def _class_starts(file: str, text: str) -> dict[str, int | None]:
    """Where each class of a module starts (a 0-based line index), by its ``__qualname__``; None if defined twice.

    Keyed by the text as well as the file's name, so that a file edited in the process is parsed again.
    """
    starts: dict[str, int | None] = {}
    _find_classes(ast.parse(text), "", starts)
    return starts


_BLOCKS = (ast.stmt, ast.excepthandler, ast.match_case)  # what holds statements; expressions hold no class


def _find_classes(node: ast.AST, prefix: str, starts: dict[str, int | None]) -> None:
    """Record the classes defined in ``node``'s statements, at any depth, under ``prefix``.

    Qualified names are spelled as Python spells ``__qualname__`` (a function's locals under
    ``f.<locals>.``), and a class starts at its first decorator, as inspect's finder has it.
    """
    for child in ast.iter_child_nodes(node):
        if not isinstance(child, _BLOCKS):
            continue
        if isinstance(child, ast.ClassDef):
            name = prefix + child.name
            first = child.decorator_list[0].lineno if child.decorator_list else child.lineno
            starts[name] = None if name in starts else first - 1
            _find_classes(child, name + ".", starts)
        elif isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
            _find_classes(child, f"{prefix}{child.name}.<locals>.", starts)
        else:
            _find_classes(child, prefix, starts)
