"""Digests of a project file that change only where a cell could see the change.

A cell depends on the code it ran, not on every line of every file it touched. For a Python file the
digest is taken over its syntax tree with the bodies of the functions the cell never entered left out
(each replaced by ``...``): module-level code, class bodies, signatures, defaults and decorators always
count, since they ran when the module was imported; a comment, a blank line or a line moved by an edit
elsewhere never counts. A function's body that ran counts whole, the functions defined inside it
included. So editing one rule changes the digest of exactly the cells that entered it.

Functions are named by their qualified name (``Square.backward``, ``outer.<locals>.inner``), which
survives edits that move lines: the set a cell entered is recorded at the commit it ran on, and the
same set elides the same bodies at a later commit. Two functions with one name (a ``def`` under each
branch of an ``if``) are both kept when either ran: when in doubt, count it.

Any other file (data, an extension module) is digested byte for byte.
"""
from __future__ import annotations

import ast
import bisect
import functools
import hashlib
from collections.abc import Iterable, Iterator

FunctionNode = ast.FunctionDef | ast.AsyncFunctionDef
FunctionSpan = tuple[str, int, int]  # qualified name, first and last line of the body
# What a file that cannot be parsed digests as: its bytes, so that any edit of it counts.
UNPARSEABLE = "bytes:"


def bytes_digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def function_spans(source: str) -> tuple[FunctionSpan, ...]:
    """Each function's qualified name with the first and last lines of its body (none if unparseable).

    Parsed once per file and kept by the caller: every cell of a runner asks which of the same file's
    functions it entered.
    """
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return ()
    return tuple((qualname, node.body[0].lineno, node.end_lineno or node.body[-1].lineno)
                 for qualname, node in _functions(tree))


def entered_functions(spans: Iterable[FunctionSpan], lines: Iterable[int]) -> set[str]:
    """The qualified names of the functions (``function_spans``) whose bodies hold any of ``lines``.

    Innermost and outer ones: a rule class made by a function (``make_rule().backward``) may be called
    by a cell that never entered the function (it ran on import, or in another cell), which still
    made the rule.
    """
    wanted = sorted(set(lines))
    return {qualname for qualname, first, last in spans if _any_between(wanted, first, last)}


def python_digest(source: bytes, kept: Iterable[str]) -> str:
    """The digest of a Python file's code with the bodies of functions not in ``kept`` left out."""
    return _python_digest(source, frozenset(kept))


@functools.lru_cache(maxsize=256)
def _python_digest(source: bytes, kept: frozenset[str]) -> str:
    """``python_digest``, once per text and set of functions in a process.

    A pull request's planner asks for the same digests three times (may the run be carried whole,
    which cells are carried, which references are offered), each of a parse and a dump of the file;
    the text itself is the key, so an edited file is digested again.
    """
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return UNPARSEABLE + bytes_digest(source)
    for node in _elided(tree, set(kept)):
        node.body = [ast.Expr(ast.Constant(...))]
    return hashlib.sha256(ast.dump(tree, annotate_fields=False).encode()).hexdigest()


def _functions(tree: ast.AST) -> Iterator[tuple[str, FunctionNode]]:
    """Every function definition with its qualified name, outer ones first."""
    def walk(node: ast.AST, prefix: str) -> Iterator[tuple[str, FunctionNode]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, FunctionNode):
                name = prefix + child.name
                yield name, child
                yield from walk(child, name + ".<locals>.")
            elif isinstance(child, ast.ClassDef):
                yield from walk(child, prefix + child.name + ".")
            else:
                yield from walk(child, prefix)

    yield from walk(tree, "")


def _elided(tree: ast.AST, kept: set[str]) -> list[FunctionNode]:
    """The functions whose bodies are left out: neither kept nor inside one that is."""
    functions = list(_functions(tree))
    inside: set[int] = set()
    for qualname, node in functions:
        if qualname in kept:
            inside.update(id(inner) for inner in ast.walk(node) if isinstance(inner, FunctionNode))
    return [node for _, node in functions if id(node) not in inside]


def _any_between(sorted_lines: list[int], first: int, last: int) -> bool:
    at = bisect.bisect_left(sorted_lines, first)
    return at < len(sorted_lines) and sorted_lines[at] <= last
