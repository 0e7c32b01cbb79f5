"""A repository's gradci.toml: which modules hold its scenarios and the default matrix.

```toml
[scenarios]
modules = ["pkg.grad_scenarios"]      # importable from the repository root; each has scenarios()

[matrix]                               # optional; command-line flags override it
backends = ["torch-rev", "jax-rev"]
devices = ["cpu", "cuda"]
dtypes = ["float64", "float32"]
```
"""
from __future__ import annotations

import dataclasses
import fnmatch
import importlib
import sys
import tomllib
from pathlib import Path
from typing import Any, Sequence

from scenarios.scenario import Scenario

CONFIG_NAME = "gradci.toml"
MATRIX_KEYS = ("backends", "devices", "dtypes")


class ProjectError(Exception):
    """A broken gradci.toml or scenario module: reported in one line, never as a traceback."""


@dataclasses.dataclass
class Matrix:
    backends: list[str] | None = None
    devices: list[str] | None = None
    dtypes: list[str] | None = None

    def overridden(self, **flags: Sequence[str] | None) -> "Matrix":
        """Flags given on the command line win over the file."""
        return Matrix(**{key: list(flags[key]) if flags.get(key) else getattr(self, key) for key in MATRIX_KEYS})


@dataclasses.dataclass
class Project:
    root: Path | None
    modules: list[str]
    matrix: Matrix
    config: dict[str, Any]


def load_project(root: str | Path) -> Project:
    root = Path(root).resolve()
    path = root / CONFIG_NAME
    if not path.is_file():
        raise ProjectError(f"{path}: not found")
    try:
        config = tomllib.loads(path.read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ProjectError(f"{path}: invalid TOML: {exc}") from None
    modules = config.get("scenarios", {}).get("modules")
    if not isinstance(modules, list) or not modules or not all(isinstance(m, str) for m in modules):
        raise ProjectError(f"{path}: [scenarios] modules must be a non-empty list of module names")
    matrix_table = config.get("matrix", {})
    if not isinstance(matrix_table, dict):
        raise ProjectError(f"{path}: [matrix] must be a table")
    unknown = set(matrix_table) - set(MATRIX_KEYS)
    if unknown:
        raise ProjectError(f"{path}: unknown [matrix] keys {sorted(unknown)}; expected {list(MATRIX_KEYS)}")
    for key, value in matrix_table.items():
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ProjectError(f"{path}: [matrix] {key} must be a list of strings")
    return Project(root=root, modules=modules, matrix=Matrix(**matrix_table), config=config)


def load_scenarios(project: Project) -> list[Scenario]:
    """Import each module from the repository root and collect its scenarios()."""
    root = str(project.root)
    sys.path.insert(0, root)
    try:
        found: list[Scenario] = []
        for name in project.modules:
            try:
                module = importlib.import_module(name)
            except Exception as exc:  # any import-time failure of user code
                raise ProjectError(f"cannot import scenario module {name!r}: {type(exc).__name__}: {exc}") from None
            factory = getattr(module, "scenarios", None)
            if not callable(factory):
                raise ProjectError(f"scenario module {name!r} has no scenarios() function")
            try:
                made = list(factory())
            except Exception as exc:
                raise ProjectError(f"{name}.scenarios() failed: {type(exc).__name__}: {exc}") from None
            bad = [type(s).__name__ for s in made if not isinstance(s, Scenario)]
            if bad:
                raise ProjectError(f"{name}.scenarios() returned non-Scenario objects ({bad[0]})")
            found.extend(made)
    finally:
        if sys.path and sys.path[0] == root:
            sys.path.pop(0)
    names = [s.name for s in found]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ProjectError(f"duplicate scenario names: {', '.join(duplicates[:5])}")
    return found


def select(scenarios: list[Scenario], pattern: str | None) -> list[Scenario]:
    """-k PATTERN: a glob on the name, or a substring when the pattern has no wildcard."""
    if not pattern:
        return scenarios
    if any(ch in pattern for ch in "*?["):
        return [s for s in scenarios if fnmatch.fnmatchcase(s.name, pattern)]
    return [s for s in scenarios if pattern in s.name]
