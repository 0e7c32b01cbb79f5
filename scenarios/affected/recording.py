"""Record, in the runner, what each cell read of its project: code, data files and folder listings.

The lines a cell ran come from the rule tracer's coverage (``gradci.scenarios.rules.tracing``); this
module adds what lines cannot show, and turns both into the cell's dependency record:

- **modules loaded**: every project module imported in the runner counts for every cell, through its
  module-level code (constants, class bodies, decorators ran when it was imported, and a cell reads
  them without running a line of the file); the functions that ran while a module was imported (while
  the scenarios loaded, or inside the first cell that imported it) count for every later cell too;
- **files opened and folders listed** under the project's root while the cell (or the loading) ran,
  seen by an audit hook (``sys.addaudithook``: every ``open``, ``os.listdir`` and ``os.scandir``
  of the process, numpy's and torch's loaders included); a folder the import system lists counts by
  the names that could be imported from it (a new module there could shadow one), not by a README;
- **caches of the project's own** (``functools.cache``/``lru_cache`` functions at module level or on
  module-level classes) are emptied before each cell, so that a cell runs what it depends on instead of
  reading another cell's cached value without a trace.

The record (``DEPENDS_KEY`` on the cell): ``{"files": {file: {"digest", "kept"}}, "data": {file: digest},
"listings": {folder: digest}, "modules": {folder: digest}}``, paths relative to the root. ``kept`` are
the functions whose bodies the digest covers (``gradci.scenarios.affected.source_digest``); a later
commit digests the same functions to see whether the cell would see a change.
"""
from __future__ import annotations

import contextlib
import functools
import os
import sys
import threading
from collections.abc import Hashable, Iterator, Mapping
from pathlib import Path
from types import FrameType, ModuleType
from typing import Any

from gradci.scenarios.affected.source_digest import (
    FunctionSpan,
    bytes_digest,
    entered_functions,
    function_spans,
    python_digest,
)

LinesByFile = Mapping[str, list[int]]
# The key under which a runner's cell record carries its dependencies.
DEPENDS_KEY = "depends"
MISSING = "missing"
# Code is followed by lines and modules, and bytecode is Python's own cache: neither is a data file.
_SKIPPED_SUFFIXES = (".py", ".pyc")
_MODULE_SUFFIXES = (".py", ".pyc", ".so", ".pyd", ".pth")


class DependencyRecorder:
    """What each cell of one project read, in one runner process."""

    def __init__(self, root: str | Path, is_users: Any = None) -> None:
        self.root = Path(root).resolve()
        self._is_users = is_users or (lambda path: True)
        self._import_lines: dict[str, set[int]] = {}  # per file: lines that ran while a module was imported
        self._import_reads: set[tuple[str, str]] = set()  # ("data" | "listings", file) read on import
        self._modules: set[str] = set()  # names of the project's modules seen so far
        self._reads: dict[Hashable, set[tuple[str, str]]] = {}
        self._sources: dict[str, bytes | None] = {}
        self._spans: dict[str, tuple[FunctionSpan, ...]] = {}  # per Python file, parsed once
        self._digests: dict[tuple[str, frozenset[str]], str] = {}
        self._known: dict[str, tuple[ModuleType, bool]] = {}  # module name → (module, whether the project's)
        self._scanned: tuple[int, dict[str, ModuleType]] | None = None  # (len(sys.modules), the project's)
        self.real_path = RealPaths()
        self._relatives: dict[str, str] = {}
        self._stamps: dict[tuple[str, Any], tuple[tuple[int, ...] | None, str]] = {}

    @contextlib.contextmanager
    def watching(self, label: Hashable) -> Iterator[None]:
        """Files and folders under the root that this block reads are ``label``'s."""
        reads = self._reads.setdefault(label, set())
        with _watched(self.root, reads):
            yield

    def before_cell(self) -> None:
        """Empty the project's own caches, so that the cell computes what it reads."""
        for function in _project_caches(self._project_modules().values()):
            function.cache_clear()

    def after(self, label: Hashable, lines: LinesByFile) -> None:
        """``label`` ran ``lines``; what modules it imported meanwhile count for every later cell."""
        modules = self._project_modules()
        new = {name: module for name, module in modules.items() if name not in self._modules}
        self._modules.update(new)
        if not new:
            return
        files = {self.relative(str(module.__file__)) for module in new.values()}
        for file, numbers in lines.items():
            if file in files:
                self._import_lines.setdefault(file, set()).update(numbers)
        self._import_reads |= self._reads.get(label, set())

    def record(self, label: Hashable, lines: LinesByFile, *, forget: bool = True) -> dict[str, Any]:
        """The dependency record of the cell ``label`` that ran ``lines`` (forgetting its reads unless told)."""
        reads = (self._reads.pop(label, set()) if forget else set(self._reads.get(label, set()))) | self._import_reads
        ran: dict[str, set[int]] = {file: set(numbers) for file, numbers in self._import_lines.items()}
        for file, numbers in lines.items():
            ran.setdefault(file, set()).update(numbers)
        files = {self.relative(str(module.__file__)) for module in self._project_modules().values()} | set(ran)
        return {
            "files": {file: self._file_entry(file, ran.get(file, set())) for file in sorted(files)},
            "data": {file: self._stamped(file, file_digest) for kind, file in sorted(reads) if kind == "data"},
            "listings": {folder: self._stamped(folder, listing_digest) for kind, folder in sorted(reads)
                         if kind == "listings"},
            "modules": {folder: self._stamped(folder, importable_digest) for kind, folder in sorted(reads)
                        if kind == "modules"},
        }

    def _stamped(self, file: str, digest: Any) -> str:
        """``digest(root, file)``, computed again only when the file's size or time of change moved.

        Every cell that read a data file (or listed a folder) records its digest: a data set read by
        each cell is hashed once, not once a cell, unless a cell rewrote it.
        """
        try:
            stat = os.stat(self.root / file)
            stamp: tuple[int, ...] | None = (stat.st_mtime_ns, stat.st_ctime_ns, stat.st_size, stat.st_ino)
        except OSError:
            stamp = None
        key = (file, digest)
        known = self._stamps.get(key)
        if known is None or stamp is None or known[0] != stamp:
            known = self._stamps[key] = (stamp, digest(self.root, file))
        return known[1]

    def _file_entry(self, file: str, ran: set[int]) -> dict[str, Any]:
        source = self._source(file)
        if source is None:
            return {"digest": MISSING, "kept": []}
        if not file.endswith(".py"):
            return {"digest": bytes_digest(source), "kept": []}
        if file not in self._spans:
            self._spans[file] = function_spans(source.decode("utf-8", "replace"))
        kept = frozenset(entered_functions(self._spans[file], ran))
        key = (file, kept)
        if key not in self._digests:
            self._digests[key] = python_digest(source, kept)
        return {"digest": self._digests[key], "kept": sorted(kept)}

    def _source(self, file: str) -> bytes | None:
        if file not in self._sources:  # read once: the checkout does not change while it is checked
            try:
                self._sources[file] = (self.root / file).read_bytes()
            except OSError:
                self._sources[file] = None
        return self._sources[file]

    def _project_modules(self) -> dict[str, ModuleType]:
        # Looked at again only when modules were imported or forgotten since (a cell imports few, if any):
        # a scan of every module costs most of what recording a cell does.
        if self._scanned is not None and self._scanned[0] == len(sys.modules):
            return self._scanned[1]
        found = {}
        for name, module in list(sys.modules.items()):
            known = self._known.get(name)
            if known is None or known[0] is not module:  # each module's file is looked at once
                known = self._known[name] = (module, self._is_project_file(getattr(module, "__file__", None)))
            if known[1]:
                found[name] = module
        self._scanned = (len(sys.modules), found)
        return found

    def _is_project_file(self, path: object) -> bool:
        return (isinstance(path, str) and self.real_path(path).startswith(str(self.root) + os.sep)
                and self._is_users(path))

    def relative(self, path: str) -> str:
        """A file under the root as its record names it: relative to the root, links followed."""
        found = self._relatives.get(path)
        if found is None:
            found = self._relatives[path] = Path(self.real_path(path)).relative_to(self.root).as_posix()
        return found


class RealPaths:
    """``os.path.realpath`` of a checkout's files, each folder resolved once.

    Thousands of modules load from a few hundred folders, and every cell's record names the same files
    again: resolving each of a path's folders (an ``lstat`` each) every time cost more than the rest of
    a cell's record. Kept per checkout, which does not change while it is checked; a file that is
    itself a link is still followed.
    """

    def __init__(self) -> None:
        self._folders: dict[str, str] = {}
        self._files: dict[str, str] = {}

    def __call__(self, path: str) -> str:
        real = self._files.get(path)
        if real is None:
            folder, name = os.path.split(os.path.abspath(path))
            real_folder = self._folders.get(folder)
            if real_folder is None:
                real_folder = self._folders[folder] = os.path.realpath(folder)
            real = os.path.join(real_folder, name)
            if os.path.islink(real):
                real = os.path.realpath(real)
            self._files[path] = real
        return real


def file_digest(root: Path, file: str) -> str:
    """The digest of a data file's bytes (``MISSING`` where it is not a file inside the root)."""
    path = inside(root, file)
    if path is None or not path.is_file():
        return MISSING
    return bytes_digest(path.read_bytes())


def listing_digest(root: Path, folder: str, importable: bool = False) -> str:
    """The digest of a folder's entry names (``MISSING`` where it is not a folder inside the root).

    ``importable``: only the names an ``import`` could find there (modules, extension modules, folders).
    """
    path = inside(root, folder)
    if path is None or not path.is_dir():
        return MISSING
    names = sorted(os.listdir(path))
    if importable:
        names = [name for name in names if name.endswith(_MODULE_SUFFIXES) or (path / name).is_dir()]
    return bytes_digest("\0".join(names).encode())


def importable_digest(root: Path, folder: str) -> str:
    """``listing_digest`` of the names an ``import`` could find in the folder."""
    return listing_digest(root, folder, importable=True)


def inside(root: Path, file: str) -> Path | None:
    """``root / file`` when it is really inside ``root`` (links followed), else None."""
    if not file or os.path.isabs(file):
        return None
    path = Path(os.path.realpath(root / file))
    return path if path == root or path.is_relative_to(root) else None


# The audit hook is process-wide and cannot be removed: one hook, which reads what is being watched.
_watchers: list[tuple[Path, set[tuple[str, str]]]] = []
_lock = threading.Lock()
_EVENTS = {"open": "data", "os.listdir": "listings", "os.scandir": "listings"}


@contextlib.contextmanager
def _watched(root: Path, reads: set[tuple[str, str]]) -> Iterator[None]:
    _install_hook()
    entry = (root, reads)
    with _lock:
        _watchers.append(entry)
    try:
        yield
    finally:
        with _lock:
            _watchers.remove(entry)


@functools.cache
def _install_hook() -> None:
    sys.addaudithook(_heard)


def _heard(event: str, args: tuple[Any, ...]) -> None:
    kind = _EVENTS.get(event)
    if kind is None or not _watchers or not args:
        return
    path = args[0]
    if isinstance(path, bytes):
        path = os.fsdecode(path)
    elif isinstance(path, os.PathLike):
        path = os.fspath(path)
    if path is None and kind == "listings":
        path = "."
    if not isinstance(path, str):
        return  # a file descriptor: its file was opened (and heard) by path before
    if kind == "listings" and _by_the_import_system():
        kind = "modules"  # only what could be imported from the folder counts: a README added does not
    if kind == "data" and (path.endswith(_SKIPPED_SUFFIXES) or "__pycache__" in path):
        return
    resolved = os.path.realpath(path)
    for root, reads in list(_watchers):
        if resolved == str(root) or resolved.startswith(str(root) + os.sep):
            reads.add((kind, Path(resolved).relative_to(root).as_posix() or "."))


def _by_the_import_system() -> bool:
    """Whether the folder being listed is listed by Python's import system (its path finder's cache)."""
    caller: FrameType | None = sys._getframe(2)  # above this and _heard: the audited call's caller
    for _ in range(4):
        if caller is None:
            return False
        if "importlib" in caller.f_code.co_filename:
            return True
        caller = caller.f_back
    return False


def _project_caches(modules: Any) -> Iterator[Any]:
    """The ``functools`` caches defined by the project's modules, on functions and classes."""
    seen: set[int] = set()
    for module in modules:
        for value in list(vars(module).values()):
            owners = [value] + (list(vars(value).values()) if isinstance(value, type)
                                and getattr(value, "__module__", None) == module.__name__ else [])
            for candidate in owners:
                function = candidate.__func__ if isinstance(candidate, (staticmethod, classmethod)) else candidate
                if hasattr(function, "cache_clear") and hasattr(function, "cache_info") and id(function) not in seen:
                    seen.add(id(function))
                    yield function
