"""Find the derivative rules a project defines, after its modules are imported.

A rule is a ``torch.autograd.Function`` subclass (its ``forward``, ``setup_context``, ``backward``,
``vjp``, ``jvp``, ``vmap``), a ``jax.custom_vjp`` or an ``equinox.filter_custom_vjp`` (``fun``, ``fwd``,
``bwd``), a ``jax.custom_jvp``
(``fun``, ``jvp``), a ``torch.library.custom_op`` with an autograd registration (its function as
``forward``, ``setup_context``, ``backward``), or the functions a call of ``jax.lax.custom_linear_solve``
(``solve``, ``transpose_solve``) or ``jax.lax.custom_root`` (``solve``, ``tangent_solve``) hands over,
found in the calls of the project's source (``solver_calls``). Only methods whose code lies in the
project's own files count: the defaults torch's ``Function`` provides are not the user's rule.

Nothing is imported here: torch and jax are looked for among the modules already loaded, so a project
that uses neither costs nothing. Functions are found by walking the project's imported modules (their
globals, and the attributes of the classes they define); ``autograd.Function`` subclasses through
torch's own subclass list, so that classes defined inside functions count once they exist. A
``custom_vjp`` or ``custom_jvp`` made inside a function on each call (jaxopt's ``custom_root`` makes
its implicit-differentiation rule so) is in no module: ``watch_rules_made_in_calls`` has jax's
``defvjp``/``defjvp`` remember each one given its rule, and ``on_rule_made`` lets a plant reach the
ones made while it stands (by ``rule_key``).
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import itertools
import linecache
import os
import sys
import types
import weakref
from collections.abc import Callable, Collection, Iterator
from pathlib import Path
from typing import Any

from gradci.scenarios.affected.recording import RealPaths
from gradci.scenarios.authoring.exceptions import is_users_file
from gradci.scenarios.rules.solver_calls import LINEAR_SOLVE, ROOT, code_of, solver_calls

TORCH_FUNCTION = "torch.autograd.Function"
CUSTOM_VJP = "jax.custom_vjp"
CUSTOM_JVP = "jax.custom_jvp"
CUSTOM_OP = "torch.library.custom_op"
CUSTOM_LINEAR_SOLVE = "jax.lax.custom_linear_solve"
CUSTOM_ROOT = "jax.lax.custom_root"
KINDS = (TORCH_FUNCTION, CUSTOM_VJP, CUSTOM_JVP, CUSTOM_OP, CUSTOM_LINEAR_SOLVE, CUSTOM_ROOT)
# The kinds whose rules jax traces: a plant in them needs jax's compiled programs forgotten.
JAX_KINDS = frozenset({CUSTOM_VJP, CUSTOM_JVP, CUSTOM_LINEAR_SOLVE, CUSTOM_ROOT})
SOLVER_KINDS = {LINEAR_SOLVE: CUSTOM_LINEAR_SOLVE, ROOT: CUSTOM_ROOT}

TORCH_METHODS = ("forward", "setup_context", "backward", "vjp", "jvp", "vmap")
# Every method name a rule may have, each kind's words together (what a stored record may name).
METHODS = (*TORCH_METHODS, "fun", "fwd", "bwd", "solve", "transpose_solve", "tangent_solve")
# The methods that compute a derivative: a rule none of whose derivative methods ran was not exercised
# (its forward runs whenever the function is called, differentiated or not).
DERIVATIVE_METHODS = frozenset({"backward", "vjp", "jvp", "fwd", "bwd"})
# A solver's derivative methods are its own: custom_linear_solve's solve solves for tangents (forward
# mode), custom_root's solve only for the value.
SOLVER_DERIVATIVE_METHODS = {CUSTOM_LINEAR_SOLVE: ("solve", "transpose_solve"), CUSTOM_ROOT: ("tangent_solve",)}


@dataclasses.dataclass(frozen=True)
class RuleMethod:
    """One method of a rule and the lines of its body: any of them run means the method ran."""

    name: str
    file: str  # relative to the project's root, with forward slashes
    first_line: int  # its first line (a decorator's, where it has one)
    lines: tuple[int, ...]
    # A hash of its source text (first to last line): two commits' rule changed where it differs, and
    # a rule only moved down a file did not ("": not known).
    digest: str = ""
    # Defined by a base class the rule shares with others (an autograd.Function's inherited backward):
    # its lines running do not say which of the classes ran it.
    inherited: bool = False

    @property
    def last_line(self) -> int:
        return max(self.lines, default=self.first_line)

    def ran(self, lines_by_file: dict[str, Any]) -> bool:
        ran = lines_by_file.get(self.file) or ()
        return not set(self.lines).isdisjoint(ran)


@dataclasses.dataclass(frozen=True)
class Rule:
    """A derivative rule of the project, named by its file and qualified name (stable across commits)."""

    kind: str
    name: str  # the class's or the primal function's qualified name; a custom op's "namespace::name"
    file: str
    methods: tuple[RuleMethod, ...]

    @property
    def id(self) -> str:
        return f"{self.file}::{self.name}"

    def method(self, name: str) -> RuleMethod | None:
        return next((m for m in self.methods if m.name == name), None)

    def derivative_methods(self) -> list[str]:
        derivative = SOLVER_DERIVATIVE_METHODS.get(self.kind, DERIVATIVE_METHODS)
        return [m.name for m in self.methods if m.name in derivative]

    def reached(self, lines_by_file: dict[str, Any], used: Collection[tuple[str, int, str]] | None = None) -> list[str]:
        """The methods of which a line ran, given the lines that ran per file.

        An inherited method's lines are its base class's, run by whichever subclass was called: they
        count for this rule only where a method the class defines itself ran too (its ``forward``).
        A class that defines none of its methods cannot be told from its base: its lines count.

        A solver's derivative methods run whenever the solver is called (jax traces them then): they
        count where jax used them for a derivative, by ``used`` ((file, first line, role) of each
        function that served one: ``gradci.scenarios.rules.solver_uses``); where that was not watched
        (None), by their lines.
        """
        by_use = SOLVER_DERIVATIVE_METHODS.get(self.kind, ()) if used is not None else ()
        ran = [m for m in self.methods
               if ((m.file, m.first_line, m.name) in used if used is not None and m.name in by_use
                   else m.ran(lines_by_file))]
        own = [m for m in self.methods if not m.inherited]
        if own and not any(not m.inherited for m in ran):
            return []
        return [m.name for m in ran]

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "kind": self.kind, "name": self.name, "file": self.file,
                "methods": [{"name": m.name, "file": m.file, "first_line": m.first_line, "lines": list(m.lines),
                             "digest": m.digest, "inherited": m.inherited} for m in self.methods]}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Rule:
        methods = tuple(RuleMethod(m["name"], m["file"], int(m["first_line"]), tuple(int(n) for n in m["lines"]),
                                   str(m.get("digest") or ""), bool(m.get("inherited", False)))
                        for m in data["methods"])
        return cls(kind=data["kind"], name=data["name"], file=data["file"], methods=methods)


def discover_rules(root: str | Path) -> list[Rule]:
    """The derivative rules defined in the project's files at ``root``, in file and line order.

    The walk keeps each rule's live objects too, for ``rule_objects`` to answer without walking again
    until the next cell runs (``forget_walks``): detection power asks for both, one after the other.
    """
    root = Path(root).resolve()
    found: dict[str, Rule] = {}
    objects: dict[str, list[Any]] = {}
    for rule, obj in _rules_and_objects(root):
        if rule.methods:
            # A class made per call of a function is made again with the same name: one rule.
            found.setdefault(rule.id, rule)
            objects.setdefault(rule.id, []).append(obj)
    _walked[root] = objects
    return sorted(found.values(), key=lambda r: (r.file, min(m.first_line for m in r.methods), r.name))


def new_checkout(root: str | Path) -> None:
    """Forget what was read of an earlier checkout at ``root``: another commit may lie there now."""
    root = Path(root).resolve()
    for kept in (_module_verdicts, _class_methods, _project_files, _scans):
        kept.pop(root, None)


def forget_walks() -> None:
    """A cell is about to run the project's code, which may make rules anew: the last walks are stale."""
    _walked.clear()


# The rules' live objects of the last walk of each root, until a cell runs (``forget_walks``).
_walked: dict[Path, dict[str, list[Any]]] = {}


def project_modules(root: Path) -> list[types.ModuleType]:
    """The imported modules whose file lies in the project (not in an environment inside it)."""
    # Thousands of modules are loaded (torch, jax), a handful of them the project's: each module's
    # verdict is kept while the same module object stays under its name.
    # The list is looked at again only when a module was imported or forgotten since (the count or the
    # last name moved): a scan of thousands costs more than the rest of a walk.
    stamp = (len(sys.modules), next(reversed(sys.modules), None))
    scanned = _scans.get(root)
    if scanned is not None and scanned[0] == stamp:
        return list(scanned[1])
    verdicts = _module_verdicts.setdefault(root, {})
    found = []
    for name, module in list(sys.modules.items()):
        known = verdicts.get(name)
        if known is None or known[0] is not module:
            known = verdicts[name] = (module, isinstance(module, types.ModuleType)
                                      and _in_project(getattr(module, "__file__", None), root))
        if known[1]:
            found.append(module)
    _scans[root] = (stamp, found)
    return list(found)


# root -> ((len(sys.modules), its last name) at the last scan, the project's modules then)
_scans: dict[Path, tuple[tuple[int, str | None], list[types.ModuleType]]] = {}
# root -> module name -> (the module, whether it is the project's)
_module_verdicts: dict[Path, dict[str, tuple[Any, bool]]] = {}


def project_jitted(root: str | Path) -> list[Any]:
    """The ``jax.jit`` functions the project's modules hold, at module level or in their classes.

    A jitted function keeps its trace: a later call runs the compiled program and none of the rule's
    Python. ``tracing`` clears their caches before each jax cell so that every cell traces its rules.
    """
    jitted_type = _jitted_type()
    if jitted_type is None:
        return []
    root = Path(root).resolve()
    found = []
    for obj in _members(root):
        if isinstance(obj, (type, types.ModuleType)):
            continue
        # equinox's filter_jit (on diffrax's, lineax's and optimistix's entry points) keeps its jax.jit in
        # ``_cached``, and the user's function as ``__wrapped__``.
        jitted = obj if isinstance(obj, jitted_type) else getattr(obj, "_cached", None)
        if isinstance(jitted, jitted_type) and _in_project(_code_file(getattr(obj, "__wrapped__", None)), root):
            found.append(jitted)
    return found


def rule_objects(root: str | Path) -> dict[str, list[Any]]:
    """The live objects behind each rule id: its ``autograd.Function`` classes, its custom_vjp or custom_jvp.

    Detection power (``gradci.scenarios.power.planting``) swaps their derivative methods for a while. A
    class made per call of a function is one rule with several classes, each listed.
    """
    root = Path(root).resolve()
    if root not in _walked:  # no walk since the last cell ran
        discover_rules(root)
    return {rule_id: list(objects) for rule_id, objects in _walked[root].items()}


# Each custom_vjp / custom_jvp given its rule while watched, the latest one per rule code: one of each is
# enough to name the rule, and a rule made on every call must not keep every call's closure alive.
_made_in_calls: dict[tuple[Any, ...], Any] = {}
# Called with each one as it is given its rule (a plant that stands: ``gradci.scenarios.power.planting``).
_on_made: list[Callable[[Any], None]] = []


def watch_rules_made_in_calls() -> None:
    """From now on, remember each ``jax.custom_vjp`` and ``jax.custom_jvp`` given its rule, wherever made.

    Once per process, where jax is loaded (a no-op otherwise): jax's ``defvjp`` and ``defjvp`` are
    wrapped, the wrapper calling the original first. Rules made before (at a module's import) are found
    by the walk of the project's modules.
    """
    jax = sys.modules.get("jax")
    if jax is None:
        return
    for cls, name in ((jax.custom_vjp, "defvjp"), (jax.custom_jvp, "defjvp")):
        original = getattr(cls, name)
        if getattr(original, "_gradci_watching", False):
            continue

        def watching(self: Any, *args: Any, _original: Any = original, **kwargs: Any) -> Any:
            result = _original(self, *args, **kwargs)
            key = rule_key(self)
            if key is not None:
                _made_in_calls[key] = self
                for hook in list(_on_made):
                    hook(self)
            return result

        functools.update_wrapper(watching, original)
        watching._gradci_watching = True  # type: ignore[attr-defined]
        setattr(cls, name, watching)


def on_rule_made(hook: Callable[[Any], None]) -> Callable[[], None]:
    """Call ``hook`` with each custom_vjp / custom_jvp given its rule from now on; the function that stops it."""
    _on_made.append(hook)
    return lambda: _on_made.remove(hook)


def rule_key(obj: Any) -> tuple[Any, ...] | None:
    """A custom_vjp's or custom_jvp's code: equal for one rule made anew on each call (None: not a rule)."""
    parts = [getattr(obj, name, None) for name in ("fun", "fwd", "bwd", "jvp")]
    codes = tuple(code_of(part) if part is not None else None for part in parts)
    return (type(obj).__name__, *codes) if any(codes) else None


def _rules_and_objects(root: Path) -> Iterator[tuple[Rule, Any]]:
    """Each rule found in the project's files with the live object it was found on."""
    yield from _torch_functions(root)
    yield from _module_rules(root)
    yield from _solver_rules(root)


def _solver_rules(root: Path) -> Iterator[tuple[Rule, Any]]:
    """The rules the project's calls of custom_linear_solve and custom_root hand over (each its own object).

    Named by the ``solve`` handed over (the primal, as a custom_vjp is named by its function), or by the
    first function of the project's where that one is a library's.
    """
    for module in project_modules(root):
        for call in solver_calls(module):
            kind = SOLVER_KINDS[call.solver]
            found = (_method(part, code, root) for part, code in call.parts.items())
            methods = tuple(m for m in found if m is not None)
            if not any(m.name in SOLVER_DERIVATIVE_METHODS[kind] for m in methods):
                continue  # its derivative rule is a library's: nothing of the user's to measure
            named = next(call.parts[m.name] for m in methods)
            rule = Rule(kind, named.co_qualname, methods[0].file, methods)
            yield rule, rule  # a plant finds the rule's functions in what jax traced, by their source


def _torch_functions(root: Path) -> Iterator[tuple[Rule, Any]]:
    torch = sys.modules.get("torch")
    if torch is None:
        return
    known = _class_methods.setdefault(root, weakref.WeakKeyDictionary())
    for cls in _subclasses(torch.autograd.Function):
        owners = tuple(next((klass for klass in cls.__mro__ if name in klass.__dict__), None) for name in TORCH_METHODS)
        defined = tuple(owner.__dict__[name] if owner is not None else None
                        for owner, name in zip(owners, TORCH_METHODS))
        # torch's own hundreds of Functions are the same at every walk: each class's methods are read
        # again only where one of them changed (a plant swapped it, a class was given one).
        cached = known.get(cls)
        if cached is not None and len(cached[0]) == len(defined) and all(a is b for a, b in zip(cached[0], defined)):
            methods = cached[1]
        else:
            methods = []
            for name, owner, entry in zip(TORCH_METHODS, owners, defined):
                method = _method(name, entry, root)
                if method is not None:
                    methods.append(dataclasses.replace(method, inherited=owner is not cls))
            known[cls] = (defined, methods)
        if methods:
            module_file = getattr(sys.modules.get(cls.__module__), "__file__", None)
            file = _relative(module_file, root) if _in_project(module_file, root) else methods[0].file
            rule = Rule(TORCH_FUNCTION, cls.__qualname__, file, tuple(methods))
            yield rule, cls


# root -> class -> (its method entries as last read, its RuleMethods)
_class_methods: dict[Path, weakref.WeakKeyDictionary[type, tuple[tuple[Any, ...], list[RuleMethod]]]] = {}


def _module_rules(root: Path) -> Iterator[tuple[Rule, Any]]:
    jax = sys.modules.get("jax")
    custom_ops = sys.modules.get("torch._library.custom_ops")
    seen: set[int] = set()
    for obj in itertools.chain(_members(root), list(_made_in_calls.values())):
        if id(obj) in seen:  # a module's own rule, remembered too when its module was imported while watched
            continue
        seen.add(id(obj))
        if jax is not None and isinstance(obj, jax.custom_vjp):
            rule = _rule(CUSTOM_VJP, obj.fun, {"fun": obj.fun, "fwd": obj.fwd, "bwd": obj.bwd}, root)
            yield rule, obj
        elif is_equinox_vjp(obj):  # diffrax's adjoints: a custom_vjp made on each call, of equinox's wrappers
            rule = _rule(CUSTOM_VJP, obj.fn, {"fun": obj.fn, "fwd": obj.fn_fwd, "bwd": obj.fn_bwd}, root)
            yield rule, obj
        elif jax is not None and isinstance(obj, jax.custom_jvp):
            rule = _rule(CUSTOM_JVP, obj.fun, {"fun": obj.fun, "jvp": obj.jvp}, root)
            yield rule, obj
        elif custom_ops is not None and isinstance(obj, custom_ops.CustomOpDef):
            parts = {"forward": getattr(obj, "_init_fn", None),
                     "setup_context": getattr(obj, "_setup_context_fn", None),
                     "backward": getattr(obj, "_backward_fn", None)}
            if parts["backward"] is not None:  # no autograd registration: no rule of the user's
                rule = _rule(CUSTOM_OP, parts["forward"], parts, root, name=getattr(obj, "_qualname", None))
                yield rule, obj


# An ``equinox.filter_custom_vjp``'s attribute holding each part of its rule.
EQUINOX_VJP_ATTRIBUTES = {"fun": "fn", "fwd": "fn_fwd", "bwd": "fn_bwd"}


def is_equinox_vjp(obj: Any) -> bool:
    """Whether ``obj`` is an ``equinox.filter_custom_vjp``: a custom_vjp whose rule is its ``fn_bwd``."""
    ad = sys.modules.get("equinox._ad")
    kind = getattr(ad, "filter_custom_vjp", None)
    return isinstance(kind, type) and isinstance(obj, kind)


def _rule(kind: str, primal: Any, parts: dict[str, Any], root: Path, name: str | None = None) -> Rule:
    methods = tuple(m for m in (_method(part, fn, root) for part, fn in parts.items()) if m is not None)
    primal_method = methods[0] if methods else None
    file = primal_method.file if primal_method else ""
    return Rule(kind, str(name or getattr(primal, "__qualname__", None) or repr(primal)), file, methods)


def _members(root: Path) -> Iterator[Any]:
    """The values of the project's modules' globals, and of the attributes of the classes they define."""
    seen: set[int] = set()
    for module in project_modules(root):
        for value in [inner for found in list(vars(module).values()) for inner in _wrapping(found)]:
            if id(value) in seen:
                continue
            seen.add(id(value))
            yield value
            if isinstance(value, type) and _in_project(getattr(sys.modules.get(value.__module__), "__file__", None),
                                                       root):
                for attribute in list(vars(value).values()):
                    inner = getattr(attribute, "__func__", attribute)  # a staticmethod's function
                    if id(inner) not in seen:
                        seen.add(id(inner))
                        yield inner


def _wrapping(value: Any) -> Iterator[Any]:
    """``value``, and what it wraps where it is a callable wrapper: ``@jax.jit`` over a ``@jax.custom_vjp``.

    Only a function's or a jitted function's ``__wrapped__`` is read (an attribute of theirs, not a
    computed one): anything else is taken as it is.
    """
    yield value
    jitted_type = _jitted_type()
    for _ in range(4):  # a few decorators deep
        if not (isinstance(value, types.FunctionType) or (jitted_type is not None and isinstance(value, jitted_type))):
            return
        value = getattr(value, "__wrapped__", None)
        if value is None:
            return
        yield value


def _jitted_type() -> type | None:
    """The type of a ``jax.jit`` function (None where jax is not loaded); made once."""
    global _JITTED_TYPE
    if _JITTED_TYPE is None:
        jax = sys.modules.get("jax")
        if jax is None:
            return None
        _JITTED_TYPE = type(jax.jit(_identity))
    return _JITTED_TYPE


_JITTED_TYPE: type | None = None


def _identity(x: Any) -> Any:
    return x


def _method(name: str, defined: Any, root: Path) -> RuleMethod | None:
    """The method ``name`` where its code lies in the project; None for torch's or jax's own."""
    code = code_of(defined)
    if code is None or not _in_project(code.co_filename, root):
        return None
    lines = {line for _, _, line in code.co_lines() if line is not None}
    # The first line is the def's (or its first decorator's): it runs when the module is imported, not
    # when the method is called. A one-line function has only that one.
    body = sorted(lines - {code.co_firstlineno}) or [code.co_firstlineno]
    return RuleMethod(name, _relative(code.co_filename, root), code.co_firstlineno, tuple(body),
                      _digest(code.co_filename, code.co_firstlineno, max(body)))


def _digest(filename: str, first: int, last: int) -> str:
    """A hash of lines ``first`` to ``last`` of the file, as Python read it (linecache: read once)."""
    linecache.checkcache(filename)  # a checkout of another commit at the same path
    text = "".join(linecache.getlines(filename)[first - 1:last])
    return hashlib.sha256(text.encode()).hexdigest()[:16] if text else ""


def _code_file(function: Callable | None) -> str | None:
    code = code_of(function)
    return code.co_filename if code is not None else None


def _subclasses(cls: type) -> Iterator[type]:
    pending: list[type] = list(cls.__subclasses__())
    seen: set[type] = set()
    while pending:
        sub = pending.pop()
        if sub not in seen:
            seen.add(sub)
            yield sub
            pending.extend(sub.__subclasses__())


def _in_project(filename: str | None, root: Path) -> bool:
    return _file_in_project(filename, root) if filename else False


def _file_in_project(filename: str, root: Path) -> bool:
    # Kept per file: a walk asks about every loaded module's file once per request.
    if filename.startswith("<"):
        return False
    real_paths, verdicts = _project_files.setdefault(root, (RealPaths(), {}))
    known = verdicts.get(filename)
    if known is None:
        real = real_paths(filename)
        known = verdicts[filename] = real.startswith(str(root) + os.sep) and is_users_file(real)
    return known


# root -> (its files' real paths, file -> whether it is the project's), until ``new_checkout``
_project_files: dict[Path, tuple[RealPaths, dict[str, bool]]] = {}


def _relative(filename: str | None, root: Path) -> str:
    return Path(filename or "").resolve().relative_to(root).as_posix()
