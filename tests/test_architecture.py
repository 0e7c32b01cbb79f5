"""The layers point one way and no module imports itself back, lazy imports included.

    gradci.cli (the command line) → gradci.web, gradci.worker → gradci.services → gradci.scenarios (the engine)

``gradci`` itself (the authoring API, re-exported from the engine) counts as the engine's layer.

Every import statement in the tree is read — at module level or inside a function — and so is every
string that names one of our modules (``importlib.import_module("gradci.worker.tasks")``,
``"gradci.web.app:create_app"``), since a module started by name is as much a dependency as an import.
Imports under ``if TYPE_CHECKING:`` count too: a cycle that only annotations close is still a
cycle between the modules' ideas, and hiding it there is how it grew.
"""
from __future__ import annotations

import ast
import os
import subprocess
import sys
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "gradci"  # its layers are links to the repository's folders (gradci/scenarios -> ../scenarios)
# Layer of each package: a module may use its own layer and those below it.
# gradci._testing (what tests/ and bench/ share) drives the command line's processes: above everything.
LAYERS = {"gradci": 0, "gradci.scenarios": 0, "gradci.services": 1, "gradci.worker": 2, "gradci.web": 2,
          "gradci.cli": 3, "gradci._testing": 4}
# ``python -m gradci`` is the command line, though it lives in the package's root folder.
PART_OF = {"gradci.__main__": "gradci.cli", "gradci.pytest_plugin": "gradci.cli"}
# Third-party packages the engine must not touch: it has no web, database or queue code.
NOT_IN_THE_ENGINE = ("sqlalchemy", "alembic", "fastapi", "starlette", "celery", "kombu", "redis", "httpx",
                     "jinja2", "psycopg", "uvicorn")


@cache
def modules() -> dict[str, Path]:
    """Dotted name → file, for every module of our packages."""
    found = {}
    for folder, _, files in os.walk(PACKAGE, followlinks=True):
        for path in (Path(folder) / file for file in files if file.endswith(".py")):
            parts = ("gradci", *path.relative_to(PACKAGE).with_suffix("").parts)
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def layer_of(name: str) -> str | None:
    """The layer a dotted name of ours belongs to: its longest prefix in LAYERS."""
    name = PART_OF.get(name, name)
    while name:
        if name in LAYERS:
            return name
        name = name.rpartition(".")[0]
    return None


def _resolve(name: str) -> str | None:
    """The module of ours that an imported dotted name lives in (``a.b.func`` → ``a.b``)."""
    while name:
        if name in modules():
            return name
        name = name.rpartition(".")[0]
    return None


def _is_package(module: str) -> bool:
    return modules()[module].name == "__init__.py"


def imports_of(module: str) -> Iterator[tuple[str, int]]:
    """(imported name, line) for every import and module-naming string in ``module``."""
    path = modules()[module]
    tree = ast.parse(path.read_text(), str(path))
    package = module if _is_package(module) else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from ((alias.name, node.lineno) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
            for alias in node.names:  # `from a import b` may name the module a.b
                yield (f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules() else base), node.lineno
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            candidate = node.value.split(":")[0]
            if candidate != module and candidate in modules() and "." in candidate:
                yield candidate, node.lineno


def edges() -> dict[str, set[str]]:
    """Which of our modules each module imports, when it runs or under ``TYPE_CHECKING``."""
    graph: dict[str, set[str]] = {name: set() for name in modules()}
    for module in modules():
        for name, _ in imports_of(module):
            target = _resolve(name)
            if target is not None and target != module:
                graph[module].add(target)
    return graph


def test_every_import_points_down_the_layers() -> None:
    wrong = []
    for module in modules():
        layer = layer_of(module)
        assert layer is not None, module
        for name, line in imports_of(module):
            target = layer_of(name)
            if target is not None and target != layer and LAYERS[target] >= LAYERS[layer] > 0:
                wrong.append(f"{modules()[module].relative_to(ROOT)}:{line} ({layer}) uses {name} ({target})")
            if layer == "gradci" and target not in (None, "gradci", "gradci.scenarios"):
                wrong.append(f"{modules()[module].relative_to(ROOT)}:{line}: the authoring API imports {name}")
            if LAYERS[layer] == 0 and target is not None and LAYERS[target] > 0:
                wrong.append(f"{modules()[module].relative_to(ROOT)}:{line} (the engine) uses {name} ({target})")
            if LAYERS[layer] == 0 and name.split(".")[0] in NOT_IN_THE_ENGINE:
                wrong.append(f"{modules()[module].relative_to(ROOT)}:{line}: the engine imports {name}")
    assert wrong == []


# Inside a layer, its folders are floors, bottom first: a module may use its own floor and those below.
# The engine: the contracts (standard library only), the numeric records, the frameworks' adapters, the
# operators, the authoring API, rule coverage, the references, the backends, the verdict, the driver
# (check.py), detection power (which re-runs cells) and the built-in library on top. The server side: its small core modules, the settings, the queue, the
# planner, the database (and its migrations), the reports, GitHub, uploads, read access and the API.
FLOORS = {
    "gradci.scenarios": ("contract", "numerics", "adapters", "operators", "authoring", "affected", "rules", "reference",
                         "backends", "verdict", "check", "power", "library"),
    "gradci.services": ("core", "settings", "broker", "planner", "db", "migrations", "reports", "github", "uploads",
                        "access", "api"),
}
SERVICES_CORE = ("repo_urls", "repo_refs", "bodies", "database_urls", "cell_fields", "secrecy", "github_limits",
                 "job_balance")


def floor_of(module: str) -> tuple[str, int] | None:
    """(layer, floor) of a module inside a layer with floors; None for the layer's own __init__ or others."""
    for layer, floors in FLOORS.items():
        if module.startswith(layer + "."):
            folder = module[len(layer) + 1:].split(".")[0]
            folder = "core" if layer == "gradci.services" and folder in SERVICES_CORE else folder
            assert folder in floors, f"{module}: put {layer}.{folder} on a floor of FLOORS"
            return layer, floors.index(folder)
    return None


def test_each_layers_folders_are_floors_imports_point_down() -> None:
    wrong = []
    for module in modules():
        here = floor_of(module)
        for name, line in imports_of(module) if here else ():
            target = _resolve(name)
            there = floor_of(target) if target else None
            if there is not None and there[0] == here[0] and there[1] > here[1]:
                wrong.append(f"{modules()[module].relative_to(ROOT)}:{line} uses {name}, a floor above")
    assert wrong == []


def test_the_floor_check_sees_an_upward_import() -> None:
    """The floor test would pass on modules it cannot place: show it places them and orders them."""
    assert floor_of("gradci.scenarios.contract.cell") == ("gradci.scenarios", 0)
    assert floor_of("gradci.scenarios.check") == ("gradci.scenarios", FLOORS["gradci.scenarios"].index("check"))
    assert floor_of("gradci.services.repo_refs") == ("gradci.services", 0)
    assert floor_of("gradci.services.db.models")[1] > floor_of("gradci.services.planner")[1]  # type: ignore[index]
    with pytest.raises(AssertionError, match="put gradci.scenarios.nowhere on a floor"):
        floor_of("gradci.scenarios.nowhere.x")


def test_no_import_cycles_between_modules() -> None:
    graph = edges()
    cycles = []
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for target in sorted(graph[module]):
            if state.get(target) == 1:
                cycles.append(" → ".join(path[path.index(target):] + [target]))
            elif target not in state:
                visit(target, path + [target])
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    assert cycles == []


def test_the_checker_sees_lazy_imports_and_module_strings() -> None:
    """The two tests above would pass on an empty graph: show that they see what they must."""
    graph = edges()
    assert "gradci.services.broker.queues" in graph["gradci.services.broker.dispatch"]            # a module-level import
    assert "gradci.cli.check" in graph["gradci.cli.commands"]                        # inside a function
    assert "gradci.worker.tasks" in graph["gradci.worker.celery_app"]                 # TASK_MODULES, a string
    assert "gradci.web.app" in graph["gradci.cli.serve"]                           # inside api_app
    assert "gradci.scenarios.check" in graph["gradci"]                           # the lazy authoring API


def _imported_by(code: str) -> set[str]:
    done = subprocess.run([sys.executable, "-c", code + "\nimport sys; print(' '.join(sys.modules))"],
                          capture_output=True, text=True, cwd=ROOT, check=True)
    return set(done.stdout.split())


HEAVY = {"numpy", "scipy", "torch", "jax"}


def test_the_cell_contract_and_the_matrix_load_no_numpy_or_framework() -> None:
    assert _imported_by("import gradci.scenarios.contract.cell, gradci.scenarios.contract.matrix, gradci.scenarios.contract.devices, "
                        "gradci.scenarios, gradci") & HEAVY == set()


def test_the_api_application_loads_no_numpy() -> None:
    assert _imported_by("import gradci.services.api.app; gradci.services.api.app.create_app") & HEAVY == set()


@pytest.mark.parametrize("command", ["submit", "status"])
def test_rest_client_commands_load_no_numpy_scipy_or_framework(command: str) -> None:
    """``gradci submit`` and ``gradci status`` talk to a server: everything their code path imports,
    as ``python -X importtime`` lists it, is free of numpy, scipy, torch and jax."""
    code = ("import sys; from typer.testing import CliRunner; from gradci.cli.commands import app; "
            f"CliRunner().invoke(app, [{command!r}, {'1' if command == 'status' else '--repo=x'!r}, "
            "'--server=http://127.0.0.1:9'])")
    done = subprocess.run([sys.executable, "-X", "importtime", "-c", code], capture_output=True, text=True,
                          cwd=ROOT, check=True)
    imported = {line.split("|")[-1].strip().split(".")[0] for line in done.stderr.splitlines()
                if line.startswith("import time:")}
    assert "gradci" in imported and "httpx" in imported  # the listing is real: the client was loaded
    assert imported & HEAVY == set()


def test_the_contract_is_standard_library_only() -> None:
    """``gradci.scenarios.contract`` is what the API process and REST clients share with the engine:
    it may import the standard library and itself, nothing else."""
    wrong = []
    for module, path in modules().items():
        if not module.startswith("gradci.scenarios.contract"):
            continue
        for name, line in imports_of(module):
            top = name.split(".")[0]
            if _resolve(name) is not None:
                if not _resolve(name).startswith("gradci.scenarios.contract"):  # type: ignore[union-attr]
                    wrong.append(f"{path.relative_to(ROOT)}:{line} imports {name}")
            elif top not in sys.stdlib_module_names and top != "__future__":
                wrong.append(f"{path.relative_to(ROOT)}:{line} imports {name}")
    assert wrong == []
    assert any(m.startswith("gradci.scenarios.contract.") for m in modules())  # it looked at something
