"""A repository's gradci.toml: which modules hold its scenarios and the default matrix.

```toml
[scenarios]
modules = ["pkg.grad_scenarios"]      # importable from the repository root; each has scenarios()

[matrix]                               # optional; command-line flags and run requests override it
backends = ["torch-rev", "jax-rev"]
devices = ["cpu", "cuda"]
dtypes = ["float64", "float32"]
scenarios = ["nn/*"]                   # selection patterns (scenarios.matrix: glob, or a plain word as a substring)
```
"""
from __future__ import annotations

import dataclasses
import importlib
import sys
import tomllib
from pathlib import Path
from typing import Any

from scenarios.matrix import Matrix, MatrixError
from scenarios.scenario import Scenario

CONFIG_NAME = "gradci.toml"


class ProjectError(Exception):
    """A broken gradci.toml or scenario module: reported in one line, never as a traceback."""


@dataclasses.dataclass
class Project:
    root: Path | None
    modules: list[str]
    matrix: Matrix
    config: dict[str, Any]


def read_config(root: str | Path) -> dict[str, Any]:
    """The repository's gradci.toml as data (plain TOML: no code runs)."""
    path = Path(root) / CONFIG_NAME
    if not path.is_file():
        raise ProjectError(f"{path}: not found")
    try:
        return tomllib.loads(path.read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ProjectError(f"{path}: invalid TOML: {exc}") from None


def load_project(root: str | Path) -> Project:
    root = Path(root).resolve()
    path = root / CONFIG_NAME
    config = read_config(root)
    scenarios_table = config.get("scenarios", {})
    modules = scenarios_table.get("modules") if isinstance(scenarios_table, dict) else None
    if not isinstance(modules, list) or not modules or not all(isinstance(m, str) for m in modules):
        raise ProjectError(f"{path}: [scenarios] modules must be a non-empty list of module names")
    try:
        matrix = Matrix.from_mapping(config.get("matrix", {}))
    except MatrixError as exc:
        raise ProjectError(f"{path}: [matrix]: {exc}") from None
    return Project(root=root, modules=modules, matrix=matrix, config=config)


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
