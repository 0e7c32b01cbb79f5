"""Find the derivative rules a project hands to jax.lax's solvers, by reading the calls in its files.

``jax.lax.custom_linear_solve(matvec, b, solve, transpose_solve, symmetric=...)`` and
``jax.lax.custom_root(f, initial_guess, solve, tangent_solve)`` take their derivative rule as
arguments: each call makes the rule anew, and no module holds it. So the calls are read from the source
of the project's imported modules (``ast``), and each argument that names a function (a ``def`` of an
enclosing function or of the module, a ``lambda``, a ``functools.partial`` of one, a module's function
by its attribute) is matched to the code object Python made of it. The rule is known before any cell
runs it, as a module-level ``custom_vjp`` is, and one no scenario calls reads "not exercised".

A call is recognised by the name it calls (``jax.lax.custom_linear_solve``, ``lax.custom_root``, or the
bare name, as a function handed the solver as an argument writes it) and by the argument that holds its
derivative rule: ``solve`` for ``custom_linear_solve``, ``tangent_solve`` for ``custom_root`` (jaxopt's
``implicit_diff.custom_root`` decorator takes none, and is not one). An argument built at run time (a
method of ``self``, a function a factory returns) is not followed: its rule is not found.
"""
from __future__ import annotations

import ast
import dataclasses
import inspect
import linecache
import os
import types
import weakref
from collections.abc import Iterator
from typing import Any

LINEAR_SOLVE, ROOT = "custom_linear_solve", "custom_root"
# Each solver's parameters in order, as jax declares them: a call binds its arguments to them.
PARAMETERS = {
    LINEAR_SOLVE: ("matvec", "b", "solve", "transpose_solve", "symmetric", "has_aux"),
    ROOT: ("f", "initial_guess", "solve", "tangent_solve", "has_aux"),
}
# The parameters that hold a function of the user's the rule is made of, and the one a call must give.
RULE_PARAMETERS = {LINEAR_SOLVE: ("solve", "transpose_solve"), ROOT: ("solve", "tangent_solve")}
REQUIRED = {LINEAR_SOLVE: "solve", ROOT: "tangent_solve"}


@dataclasses.dataclass(frozen=True)
class SolverCall:
    """One call of a solver in a module's source: the code of each function of the rule it hands over."""

    solver: str  # LINEAR_SOLVE or ROOT
    line: int
    parts: dict[str, types.CodeType]  # parameter name -> the code of the function given for it


def solver_calls(module: types.ModuleType) -> list[SolverCall]:
    """The solver calls in ``module``'s source whose rule functions were found (read once per module and file)."""
    filename = getattr(module, "__file__", None)
    if not filename or not filename.endswith(".py"):
        return []
    try:
        stat = os.stat(filename)
    except OSError:
        return []
    stamp = (filename, stat.st_mtime_ns, stat.st_size)
    kept = _read.get(module)
    if kept is not None and kept[0] == stamp:
        return kept[1]
    calls = list(_calls_in(module, filename))
    _read[module] = (stamp, calls)
    return calls


# module -> (its file's (name, mtime, size) when read, the calls found): a module object and its file
# do not change between walks; a module imported again is another object.
_read: weakref.WeakKeyDictionary[types.ModuleType, tuple[tuple[str, int, int], list[SolverCall]]] = \
    weakref.WeakKeyDictionary()


def _calls_in(module: types.ModuleType, filename: str) -> Iterator[SolverCall]:
    linecache.checkcache(filename)
    source = "".join(linecache.getlines(filename))
    if LINEAR_SOLVE not in source and ROOT not in source:  # most modules: no parse
        return
    try:
        tree = ast.parse(source, filename)
    except (SyntaxError, ValueError):
        return
    codes = _CodeIndex(module, filename)
    for call, scopes in _calls_with_scopes(tree):
        solver = _solver_called(call)
        if solver is None:
            continue
        arguments = _bind(call, PARAMETERS[solver])
        if REQUIRED[solver] not in arguments:
            continue
        parts: dict[str, types.CodeType] = {}
        for parameter in RULE_PARAMETERS[solver]:
            code = _resolve(arguments.get(parameter), scopes, module, codes)
            if code is not None:
                parts[parameter] = code
        symmetric = arguments.get("symmetric")
        if (solver == LINEAR_SOLVE and "transpose_solve" not in arguments and "solve" in parts
                and isinstance(symmetric, ast.Constant) and symmetric.value is True):
            parts["transpose_solve"] = parts["solve"]  # jax hands solve over as the transpose solve
        if parts:
            yield SolverCall(solver, call.lineno, parts)


def _calls_with_scopes(tree: ast.Module) -> Iterator[tuple[ast.Call, list[ast.AST]]]:
    """Each call in ``tree`` with its enclosing function scopes, innermost last (the module first)."""
    def visit(node: ast.AST, scopes: list[ast.AST]) -> Iterator[tuple[ast.Call, list[ast.AST]]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Call):
                yield child, scopes
            inner = [*scopes, child] if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)) \
                else scopes
            yield from visit(child, inner)

    yield from visit(tree, [tree])


def _solver_called(call: ast.Call) -> str | None:
    func = call.func
    name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
    return name if name in PARAMETERS else None


def _bind(call: ast.Call, parameters: tuple[str, ...]) -> dict[str, ast.expr]:
    if any(isinstance(arg, ast.Starred) for arg in call.args):
        return {}
    bound = dict(zip(parameters, call.args))
    bound.update((keyword.arg, keyword.value) for keyword in call.keywords if keyword.arg in parameters)
    return bound


def _resolve(node: ast.expr | None, scopes: list[ast.AST], module: types.ModuleType,
             codes: _CodeIndex) -> types.CodeType | None:
    """The code of the function ``node`` names where the call is made; None where it cannot be told."""
    if isinstance(node, ast.Lambda):
        return codes.of_lambda(node)
    if isinstance(node, ast.Call) and node.args and _last_name(node.func) == "partial":
        return _resolve(node.args[0], scopes, module, codes)
    if isinstance(node, ast.Name):
        for scope in reversed(scopes):
            found = _defined_in(scope, node.id)
            if isinstance(found, ast.Lambda):
                return codes.of_lambda(found)
            if found is not None:
                return codes.of_def(found)
        return code_of(vars(module).get(node.id))
    if isinstance(node, ast.Attribute):  # a function of an imported module: pkg.solvers.cg
        path = []
        while isinstance(node, ast.Attribute):
            path.append(node.attr)
            node = node.value
        if not isinstance(node, ast.Name) or node.id not in vars(module):
            return None
        target: Any = vars(module)[node.id]
        for attribute in reversed(path):
            if not isinstance(target, (types.ModuleType, type)):
                return None  # an instance's attribute is computed: not followed
            target = inspect.getattr_static(target, attribute, None)
        return code_of(target)
    return None


def _defined_in(scope: ast.AST, name: str) -> ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda | None:
    """The last ``def name`` (or ``name = lambda ...``) of ``scope``'s own body, not of a nested function."""
    found: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda | None = None
    pending = list(scope.body) if isinstance(scope, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef)) else []
    while pending:
        node = pending.pop(0)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            found = node if node.name == name else found
            continue
        if isinstance(node, ast.ClassDef):
            continue
        if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Lambda)
                and any(isinstance(t, ast.Name) and t.id == name for t in node.targets)):
            found = node.value
        pending.extend(child for child in ast.iter_child_nodes(node) if isinstance(child, ast.stmt))
    return found


def _last_name(node: ast.expr) -> str | None:
    return node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None


def code_of(defined: Any) -> types.CodeType | None:
    """The code of a function, a method, a decorated function, or a code object itself; None for anything else."""
    if isinstance(defined, types.CodeType):
        return defined
    function = getattr(defined, "__func__", defined)  # staticmethod, classmethod
    try:
        function = inspect.unwrap(function)  # once_differentiable, functools.wraps decorators
    except ValueError:  # a cycle of __wrapped__
        return None
    code = getattr(function, "__code__", None)
    return code if isinstance(code, types.CodeType) else None


class _CodeIndex:
    """The code objects of a module's functions, nested ones included, by first line and name."""

    def __init__(self, module: types.ModuleType, filename: str) -> None:
        self._by_place: dict[tuple[int, str], list[types.CodeType]] = {}
        real = os.path.realpath(filename)
        seen: set[int] = set()
        pending = [code for code in map(code_of, self._functions(module)) if code is not None]
        while pending:
            code = pending.pop()
            if id(code) in seen or os.path.realpath(code.co_filename) != real:
                continue
            seen.add(id(code))
            self._by_place.setdefault((code.co_firstlineno, code.co_name), []).append(code)
            pending.extend(const for const in code.co_consts if isinstance(const, types.CodeType))

    @staticmethod
    def _functions(module: types.ModuleType) -> Iterator[Any]:
        for value in list(vars(module).values()):
            yield value
            if isinstance(value, type) and value.__module__ == module.__name__:
                yield from list(vars(value).values())

    def of_def(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> types.CodeType | None:
        first = min([node.lineno, *(decorator.lineno for decorator in node.decorator_list)])
        codes = self._by_place.get((first, node.name)) or self._by_place.get((node.lineno, node.name)) or []
        return codes[0] if codes else None

    def of_lambda(self, node: ast.Lambda) -> types.CodeType | None:
        """A lambda's code, by its line and parameters (``lambda y: …`` beside ``lambda g, y: …``).

        Two lambdas of the same parameters on one line give the same rule method either way: the same
        line, and the role they are handed as tells them apart where jax uses them.
        """
        names = tuple(arg.arg for arg in (*node.args.posonlyargs, *node.args.args))
        return next((code for code in self._by_place.get((node.lineno, "<lambda>"), ())
                     if code.co_varnames[:code.co_argcount] == names), None)
