"""Record, with coverage.py, the lines of a project's own files that each cell ran.

One ``coverage.Coverage`` per project, measuring only files under its root that are the user's (not
an environment inside it, not gradci's), started around each cell's computation and labelled with
the cell by a dynamic context (``switch_context``): the per-cell record is that context's lines.
Starting and stopping costs microseconds; a ``Coverage`` per cell, or erasing its data, costs
milliseconds (measured: bench/rule_coverage.py). On Python 3.12+ coverage.py's ``sys.monitoring``
core runs, on 3.11 its C tracer.

What runs under ``jax.jit`` is the trace: a rule's Python runs when its program is traced, and a
later call of a cached program runs none of it. Two caches would hide a rule from later cells:

- the engine's own kept programs (``gradci.scenarios.backends.framework_backend.PROGRAMS``): a cell
  that reuses a program another cell traced is given the lines that program's trace ran
  (``kept_program``), so the record follows the trace, once per trace, to every cell that runs it;
- the project's own ``jax.jit`` functions (a module-level ``@jax.jit``): their caches are cleared
  before each jax cell, so that each cell traces through them (the cost of a trace and a compile of
  those functions alone: ``jax.clear_caches()`` would recompile every primitive of every cell).

The functions handed to ``jax.lax.custom_linear_solve`` and ``custom_root`` run when the call is made,
whatever the cell differentiates: which of them served a derivative is what jax's rules of those
calls did while the cell ran (``solver_uses``), kept beside its lines and following kept programs as
they do.

Torch runs a CUDA backward on its own device threads, which a tracer set with ``sys.settrace`` (3.11)
does not see: there, torch's multithreaded backward is switched off while a cell runs, so that the
backward runs on the cell's thread (the same kernels, in the same order).
"""
from __future__ import annotations

import contextlib
import dataclasses
import fnmatch
import sys
import warnings
from collections.abc import Callable, Hashable, Iterator
from contextvars import ContextVar
from pathlib import Path
from typing import Any

from gradci.scenarios.affected.recording import DependencyRecorder
from gradci.scenarios.authoring.exceptions import is_users_file
from gradci.scenarios.rules.discovery import (
    Rule,
    discover_rules,
    forget_walks,
    new_checkout,
    project_jitted,
    watch_rules_made_in_calls,
)
from gradci.scenarios.rules.records import CellRules, LinesByFile, Used
from gradci.scenarios.rules.solver_uses import SolverUse, on_solver_use, used_sources, watch_jax_solvers, watching

CellKey = tuple[str, str, str, str]
# coverage.py's own warnings that say nothing about the user's code here.
QUIET = ["no-data-collected", "module-not-measured", "module-not-imported", "already-imported", "no-sysmon"]


@dataclasses.dataclass
class _Recording:
    label: str
    made: set[Hashable] = dataclasses.field(default_factory=set)
    reused: set[Hashable] = dataclasses.field(default_factory=set)
    solver_uses: list[SolverUse] = dataclasses.field(default_factory=list)
    paused: bool = False


class RuleTracer:
    """The lines of one project's files that each cell ran, and the project's rules."""

    def __init__(self, root: str | Path) -> None:
        import coverage

        self.root = Path(root).resolve()
        new_checkout(self.root)  # another commit may have been checked out at this path before
        omit = _not_users_under(self.root)
        self._coverage = coverage.Coverage(data_file=None, include=[f"{self.root}/*"], omit=omit,
                                           config_file=False, branch=False)
        # What each cell read beside its lines: the modules loaded, data files, folder listings.
        self.dependencies = DependencyRecorder(
            self.root, lambda path: is_users_file(path) and not any(fnmatch.fnmatch(path, pattern) for pattern in omit))
        self._coverage.set_option("run:disable_warnings", QUIET)
        if hasattr(sys, "monitoring"):  # 3.12+: the sys.monitoring core, which per-cell contexts allow
            self._coverage.set_option("run:core", "sysmon")
        self._records: dict[CellKey, LinesByFile] = {}
        self._used: dict[CellKey, Used] = {}
        self._programs: dict[Hashable, tuple[LinesByFile, Used]] = {}
        self._current: _Recording | None = None
        self._count = 0
        self._jitted: list[Any] | None = None
        # Set per request: a trusted run's references are kept for later runs, with what they read.
        self.records_references = False
        self._watch_jax()

    @contextlib.contextmanager
    def cell(self, key: CellKey, framework: str) -> Iterator[None]:
        """Record the lines the cell ``key`` runs inside this block (nested blocks add to the outer one)."""
        if self._current is not None:
            yield
            return
        self._count += 1
        recording = self._current = _Recording(f"cell {self._count}")
        if framework == "jax":
            self._watch_jax()  # jax may have been imported since the tracer was made
            self._clear_jitted()
        self.dependencies.before_cell()
        try:
            with _backward_on_this_thread(framework), self._measured(key, recording.label):
                yield
        finally:
            self._current = None
            self._store(key, recording)
            self.dependencies.after(key, self._records.get(key, {}))

    @contextlib.contextmanager
    def loading(self) -> Iterator[None]:
        """The project's scenarios load in this block: what its imports run and read counts for every cell."""
        label = "loading"
        with self._measured(label, label):
            yield
        self.dependencies.after(label, self._read(label))

    @contextlib.contextmanager
    def _measured(self, label: Hashable, context: str) -> Iterator[None]:
        """coverage.py measuring this block under ``context``, the dependency recorder watching ``label``."""
        with warnings.catch_warnings(), self.dependencies.watching(label):
            warnings.simplefilter("ignore")  # coverage.py's own, about measuring: nothing of the block's
            self._coverage.start()
            try:
                self._coverage.switch_context(context)
                yield
            finally:
                self._coverage.stop()

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """A block inside a cell whose lines are not the cell's (a reference computed on the way)."""
        recording = self._current
        if recording is None or recording.paused:
            yield
            return
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self._coverage.stop()
        recording.paused = True
        try:
            yield
        finally:
            recording.paused = False
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                self._coverage.start()
                self._coverage.switch_context(recording.label)

    @contextlib.contextmanager
    def reference(self, function: str) -> Iterator[Callable[[], dict[str, Any]]]:
        """A reference of ``function``'s scenarios computed in this block; gives its dependency record.

        The record is of everything any reference of the function ran and read in this runner so far,
        under one label per function (``Scenario.function_fingerprint``): the scenarios of a function
        share f's evaluations (``EvaluationMemo``), so a reference may stand on values another of them
        computed. Call the given function after the block. Inside a cell, the cell's lines stop meanwhile
        (``paused``: the reference is not the cell's). The project's own caches are emptied first,
        as before a cell: a value an earlier cell cached would be read without running a line.
        """
        label = f"reference {function}"
        self.dependencies.before_cell()
        with self.paused(), self._measured(label, label):
            yield lambda: self.dependencies.record(label, self._read(label), forget=False)

    def kept_program(self, key: Hashable, made: bool) -> None:
        """A cell made (``made``) or reused a kept compiled program: its trace's lines follow it."""
        if self._current is not None:
            (self._current.made if made else self._current.reused).add(key)

    def solver_used(self, use: SolverUse) -> None:
        """jax used a function handed to a solver for a derivative (``solver_uses``), in the running cell."""
        if self._current is not None and not self._current.paused:
            self._current.solver_uses.append(use)

    def lines(self, key: CellKey) -> LinesByFile:
        return self._records.get(key, {})

    def depends(self, key: CellKey) -> dict[str, Any]:
        """The cell's dependency record (``gradci.scenarios.affected.recording``); call it before ``take``."""
        return self.dependencies.record(key, self._records.get(key, {}))

    def take(self, key: CellKey, rules: list[Rule]) -> CellRules:
        """The cell's record (forgotten here: a runner's cells are sent once)."""
        used = self._used.pop(key, set())
        return CellRules.of(self._records.pop(key, {}), rules, used if watching() else None)

    def rules(self) -> list[Rule]:
        """The project's rules as they are now (classes made inside functions count once made)."""
        return discover_rules(self.root)

    def _store(self, key: CellKey, recording: _Recording) -> None:
        lines = self._read(recording.label)
        used = self._relative_uses(recording.solver_uses)
        for program in recording.made:
            kept_lines, kept_used = self._programs.get(program, ({}, set()))
            self._programs[program] = (_union(kept_lines, lines), kept_used | used)
        for program in recording.reused - recording.made:
            kept_lines, kept_used = self._programs.get(program, ({}, set()))
            lines, used = _union(lines, kept_lines), used | kept_used
        self._records[key] = _union(self._records.get(key, {}), lines)
        self._used[key] = self._used.get(key, set()) | used

    def _relative_uses(self, uses: list[SolverUse]) -> Used:
        """The project's functions that served a derivative, as (file relative to the root, first line, role)."""
        found = set()
        for source in used_sources(uses):
            if Path(source.file).is_relative_to(self.root):
                found.add((Path(source.file).relative_to(self.root).as_posix(), source.line, source.role))
        return found

    def _read(self, label: str) -> LinesByFile:
        data = self._coverage.get_data()
        data.set_query_context(label)
        found: LinesByFile = {}
        for filename in data.measured_files():
            lines = data.lines(filename)
            if lines:
                found[self.dependencies.relative(filename)] = sorted(lines)
        return found

    @staticmethod
    def _watch_jax() -> None:
        """Watch, where jax is loaded, the rules it makes inside calls and what its solvers do (once each)."""
        global _forwarding
        watch_rules_made_in_calls()  # a custom_vjp made inside a function on each call is in no module
        watch_jax_solvers()
        if not _forwarding:
            _forwarding = True
            on_solver_use(_to_active_tracer)

    def _clear_jitted(self) -> None:
        if self._jitted is None:  # the project's modules are imported by the first cell
            self._jitted = project_jitted(self.root)
        for function in self._jitted:
            function.clear_cache()


_active: ContextVar[RuleTracer | None] = ContextVar("gradci_rule_tracer", default=None)


@contextlib.contextmanager
def tracing(tracer: RuleTracer | None) -> Iterator[None]:
    """Cells checked inside this block record their lines with ``tracer`` (None: nothing recorded)."""
    token = _active.set(tracer)
    try:
        yield
    finally:
        _active.reset(token)


def cell_lines(key: CellKey, framework: str) -> contextlib.AbstractContextManager[None]:
    """The block where the cell ``key`` computes: its lines are recorded where a tracer is active."""
    forget_walks()  # the cell runs the project's code: a rule found before may have been made anew
    tracer = _active.get()
    return tracer.cell(key, framework) if tracer is not None else contextlib.nullcontext()


@contextlib.contextmanager
def reference_record(function: str) -> Iterator[Callable[[], dict[str, Any]] | None]:
    """A reference computed in this block; gives a function giving its dependency record, or None.

    None where no tracer records references (a pull request's run, a check without a repository):
    there the block is a reference that is no cell's, as ``not_a_cells_lines`` has it.
    """
    tracer = _active.get()
    if tracer is None or not tracer.records_references:
        with not_a_cells_lines():
            yield None
        return
    with tracer.reference(function) as record:
        yield record


def not_a_cells_lines() -> contextlib.AbstractContextManager[None]:
    """A block inside a cell that computes no derivative of it (a reference): its lines are left out."""
    tracer = _active.get()
    return tracer.paused() if tracer is not None else contextlib.nullcontext()


_forwarding = False  # whether solvers' steps are told to the active tracer (from the first tracer on)


def _to_active_tracer(use: SolverUse, out: Any) -> Any:
    tracer = _active.get()
    if tracer is not None:
        tracer.solver_used(use)
    return out


def kept_program(key: Hashable, made: bool) -> None:
    """See ``RuleTracer.kept_program``; nothing where no tracer is active."""
    tracer = _active.get()
    if tracer is not None:
        tracer.kept_program(key, made)


@contextlib.contextmanager
def _backward_on_this_thread(framework: str) -> Iterator[None]:
    torch = sys.modules.get("torch") if framework == "torch" and not hasattr(sys, "monitoring") else None
    if torch is None or not torch.cuda.is_available():
        yield
        return
    with torch.autograd.set_multithreading_enabled(False):
        yield


def _not_users_under(root: Path) -> list[str]:
    """Patterns of folders under ``root`` that are not the user's code (a virtual environment in it)."""
    candidates = {Path(entry).resolve() for entry in sys.path if entry and Path(entry).resolve().is_relative_to(root)}
    candidates |= {path for path in root.glob("*/lib/python*/site-packages")}
    return sorted(f"{path}/*" for path in candidates if path != root and not is_users_file(str(path / "x.py")))


def _union(a: LinesByFile, b: LinesByFile) -> LinesByFile:
    if not b:
        return a
    if not a:
        return b
    return {file: sorted(set(a.get(file, ())) | set(b.get(file, ()))) for file in sorted({*a, *b})}
