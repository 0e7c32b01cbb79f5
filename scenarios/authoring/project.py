"""A repository's gradci.toml: which modules hold its scenarios and the default matrix.

```toml
[scenarios]
modules = ["pkg.grad_scenarios"]      # importable from the repository root; each has scenarios(),
                                       # or "pkg.grad_scenarios:my_scenarios" names the function

[matrix]                               # optional; command-line flags and run requests override it
backends = ["torch-rev", "jax-rev"]
devices = ["cpu", "cuda"]
dtypes = ["float64", "float32"]
scenarios = ["nn/*"]                   # selection patterns (scenarios.matrix: glob, or a plain word as a substring)

[[expect]]                             # optional, repeatable: suite-wide expected failures, applied
scenario = "entmax/*"                  # after each scenario's own (globs on scenario, backend, device,
backend = "torch-func-*"               # dtype; "*" where left out)
raises = "RuntimeError"                # optional: the exception's class name; else any failure
match = "autograd.Function"            # optional: a regular expression its text must contain
reason = "old-style autograd.Function: torch.func refuses it"

[check]                                # optional; gradci check's own settings
cell_timeout_s = 300                   # per cell, in the sandboxed runner (--cell-timeout overrides it)
repeats = 3                            # each derivative 3 times, to see it is bitwise reproducible
                                       # (gradci check and the service's runs; --repeats overrides it)
timings = true                         # steady-state times over repeated calls (default: one call;
                                       # gradci check and the service's runs; --timings/--no-timings)
```
"""
from __future__ import annotations

import dataclasses
import fnmatch
import importlib
import re
import sys
import time
import tomllib
import types
from pathlib import Path
from typing import Any

from gradci.scenarios.adapters import global_state
from gradci.scenarios.authoring.exceptions import add_import_root
from gradci.scenarios.authoring.expectations import AXES, Expect
from gradci.scenarios.authoring.scenario import Scenario
from gradci.scenarios.contract.matrix import Matrix, MatrixError

CONFIG_NAME = "gradci.toml"


class ProjectError(Exception):
    """A broken gradci.toml or scenario module: reported in one line, never as a traceback."""


@dataclasses.dataclass
class Project:
    root: Path | None
    modules: list[str]
    matrix: Matrix
    config: dict[str, Any]
    cell_timeout_s: float | None = None  # [check] cell_timeout_s: gradci check's, unless its flag says otherwise
    repeats: int | None = None  # [check] repeats: over every scenario's own (scenarios.repeats)
    timings: bool | None = None  # [check] timings: steady-state times over repeated calls (None: not said)
    expect: tuple[tuple[str, Expect], ...] = ()  # [[expect]]: (scenario glob, expectation)


def config_path(root: str | Path) -> Path:
    """The repository's gradci.toml, or ``root`` itself where it names a TOML file.

    The pytest plugin writes one for scenarios beside tests, naming the import root in
    ``[scenarios] root``.
    """
    root = Path(root)
    return root if root.suffix == ".toml" else root / CONFIG_NAME


def read_config(root: str | Path) -> dict[str, Any]:
    """The repository's gradci.toml as data (plain TOML: no code runs)."""
    path = config_path(root)
    if not path.is_file():
        raise ProjectError(f"{path}: not found")
    try:
        return tomllib.loads(path.read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ProjectError(f"{path}: invalid TOML: {exc}") from None


def load_project(root: str | Path) -> Project:
    path = config_path(Path(root).resolve())
    config = read_config(path)
    scenarios_table = config.get("scenarios", {})
    named_root = scenarios_table.get("root") if isinstance(scenarios_table, dict) and path.name != CONFIG_NAME else None
    root = Path(named_root).resolve() if isinstance(named_root, str) else path.parent
    modules = scenarios_table.get("modules") if isinstance(scenarios_table, dict) else None
    if not isinstance(modules, list) or not modules or not all(isinstance(m, str) for m in modules):
        raise ProjectError(f"{path}: [scenarios] modules must be a non-empty list of module names")
    try:
        matrix = Matrix.from_mapping(config.get("matrix", {}))
    except MatrixError as exc:
        raise ProjectError(f"{path}: [matrix]: {exc}") from None
    return Project(root=root, modules=modules, matrix=matrix, config=config,
                   cell_timeout_s=_cell_timeout(config, path), repeats=_repeats(config, path),
                   timings=_timings(config, path), expect=_suite_expectations(config, path))


EXPECT_FIELDS = {"scenario", "backend", "device", "dtype", "raises", "match", "reason"}


def _suite_expectations(config: dict[str, Any], path: Path) -> tuple[tuple[str, Expect], ...]:
    """gradci.toml's [[expect]] tables, each checked: one line naming the table and the field."""
    tables = config.get("expect", [])
    if not isinstance(tables, list) or not all(isinstance(t, dict) for t in tables):
        raise ProjectError(f"{path}: expect must be an array of tables ([[expect]]), not {type(tables).__name__}")
    found = []
    for number, table in enumerate(tables, start=1):
        where = f"{path}: [[expect]] number {number}"
        unknown = sorted(set(table) - EXPECT_FIELDS)
        if unknown:
            known = ", ".join(sorted(EXPECT_FIELDS))
            raise ProjectError(f"{where}: unknown field {unknown[0]!r}; expected some of {known}")
        bad = [k for k, v in table.items() if not isinstance(v, str) or not v.strip()]
        if bad:
            raise ProjectError(f"{where}: {bad[0]} must be a non-empty string, not {table[bad[0]]!r}")
        if "reason" not in table:
            raise ProjectError(f"{where}: every expectation needs a reason")
        if "match" in table:
            try:
                re.compile(table["match"])
            except re.error as exc:
                raise ProjectError(f"{where}: match is not a regular expression: {exc}") from None
        fields = {axis: table.get(axis, "*") for axis in AXES}
        found.append((table.get("scenario", "*"), Expect(table["reason"], raises=table.get("raises"),
                                                           match=table.get("match"), **fields)))
    return tuple(found)


def _cell_timeout(config: dict[str, Any], path: Path) -> float | None:
    table = config.get("check", {})
    value = table.get("cell_timeout_s") if isinstance(table, dict) else None
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0):
        raise ProjectError(f"{path}: [check] cell_timeout_s must be a positive number of seconds, not {value!r}")
    return value


def _repeats(config: dict[str, Any], path: Path) -> int | None:
    table = config.get("check", {})
    value = table.get("repeats") if isinstance(table, dict) else None
    if value is not None and (type(value) is not int or value < 1):
        raise ProjectError(f"{path}: [check] repeats must be a whole number of at least 1, not {value!r}")
    return value


def _timings(config: dict[str, Any], path: Path) -> bool | None:
    table = config.get("check", {})
    value = table.get("timings") if isinstance(table, dict) else None
    if value is not None and not isinstance(value, bool):
        raise ProjectError(f"{path}: [check] timings must be true or false, not {value!r}")
    return value


DEFAULT_FACTORY = "scenarios"


def load_scenarios(project: Project) -> list[Scenario]:
    """Import each module from the repository root and collect its scenarios.

    A module named "pkg.mod" gives them from its ``scenarios()``, "pkg.mod:my_scenarios" from
    ``my_scenarios()``.
    """
    root = str(project.root)
    add_import_root(root)  # the user's files are named relative to it in cells' messages
    # The frameworks imported so far (a runner imports its cells' frameworks before their source):
    # their state is the baseline each module's changes are measured against. Importing the others
    # here would cost every cell request of a fresh runner their import, within its timeout.
    baseline = global_state.capture()
    sys.path.insert(0, root)
    try:
        found: list[Scenario] = []
        for entry in project.modules:
            start = time.perf_counter()
            made = _scenarios_of(entry)
            elapsed_ms = (time.perf_counter() - start) * 1e3  # the import and the scenarios() call
            # Each module's scenarios run in the state its import left; the next module starts from
            # the baseline again (gradci.scenarios.adapters.global_state).
            after = global_state.capture()
            for scenario in made:
                scenario.__dict__["_module_state"] = (after, global_state.changes(baseline, after))
                scenario.__dict__["_import_ms"] = elapsed_ms
            global_state.restore(baseline)
            found.extend(made)
    finally:
        if sys.path and sys.path[0] == root:
            sys.path.pop(0)
    for scenario in found:  # suite-wide expectations follow the scenario's own (the first matching wins)
        extra = tuple(expect for pattern, expect in project.expect if fnmatch.fnmatchcase(scenario.name, pattern))
        scenario.xfail = (*scenario.xfail, *extra)
    names = [s.name for s in found]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ProjectError(f"duplicate scenario names: {', '.join(duplicates[:5])}")
    return found


def _scenarios_of(entry: str) -> list[Scenario]:
    name, _, function = entry.partition(":")
    function = function or DEFAULT_FACTORY
    if not name or not all(part.isidentifier() for part in [*name.split("."), function]):
        raise ProjectError(f"{CONFIG_NAME}: [scenarios] modules entry {entry!r} is not \"package.module\" "
                           f"or \"package.module:function\"")
    try:
        module = importlib.import_module(name)
    except Exception as exc:  # noqa: BLE001 - any import-time failure of user code is the project's error
        raise ProjectError(f"cannot import scenario module {name!r}: {type(exc).__name__}: {exc}") from None
    factory = getattr(module, function, None)
    if not callable(factory) or isinstance(factory, types.ModuleType):
        given = "nothing" if factory is None else f"a {type(factory).__name__}"
        raise ProjectError(f"scenario module {name!r}: {function} is {given}; expected a function returning "
                           f"a list of gradci.Scenario")
    try:
        produced: Any = factory()  # anything: list() refuses a non-iterable, the check below non-Scenarios
        made = list(produced)
    except Exception as exc:  # noqa: BLE001 - user code may raise anything: reported as the project's error
        raise ProjectError(f"{name}.{function}() failed: {type(exc).__name__}: {exc}") from None
    if not made:
        raise ProjectError(f"scenario module {name!r}: {function}() returned no scenarios; give it at least one, "
                           f"or remove {entry!r} from gradci.toml's [scenarios] modules")
    bad = [type(s).__name__ for s in made if not isinstance(s, Scenario)]
    if bad:
        raise ProjectError(f"{name}.{function}() returned a {bad[0]} among its scenarios; expected only "
                           f"gradci.Scenario")
    return made
