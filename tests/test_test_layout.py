"""The test layer's own rules: helpers in ``tests/support`` (and what ``bench/`` shares with the tests
in ``gradci._testing``), fixtures in conftest.py files, test modules that import no other test module,
and ``bench/`` and ``gradci._testing`` that import nothing from ``tests`` (but ``bench/`` its fakes)."""
from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TESTS = ROOT / "tests"


def imported(path: Path) -> Iterator[str]:
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.module
            yield from (f"{node.module}.{alias.name}" for alias in node.names)


def ours(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*.py") if "data" not in p.relative_to(folder).parts[:1]]


def test_bench_and_gradci_testing_import_nothing_from_tests() -> None:
    """``bench/`` may use the fakes of what is outside this machine (``tests.support``: GitHub, its
    payloads and webhooks; other hosts, as network namespaces, with the private PostgreSQL and Redis
    they reach over the network), to time the service as the tests drive it; nothing else of the tests."""
    offenders = {str(p.relative_to(ROOT)): name for folder in (ROOT / "bench", ROOT / "gradci" / "_testing")
                 for p in ours(folder) for name in imported(p) if name.split(".")[0] == "tests"
                 and not (folder.name == "bench" and name.startswith(FAKES))}
    assert offenders == {}


FAKES = ("tests.support.fake_github", "tests.support.payloads", "tests.support.webhook_client",
         "tests.support.netns", "tests.support.faults")


def test_test_support_has_one_home_per_helper_and_no_re_exports() -> None:
    """gradci._testing (what the tests, bench/ and the checked projects share) and tests/support (the
    tests' fakes) hold different modules, and neither re-exports the other with ``import *``."""
    shared = {p.stem for p in (ROOT / "gradci" / "_testing").glob("*.py")} - {"__init__"}
    own = {p.stem for p in (TESTS / "support").glob("*.py")} - {"__init__"}
    assert shared & own == set()
    starred = [str(p.relative_to(ROOT)) for folder in (ROOT / "gradci" / "_testing", TESTS / "support")
               for p in folder.glob("*.py") if "import *" in p.read_text()]
    assert starred == []


def test_no_test_module_imports_another_test_module() -> None:
    offenders = {str(p.relative_to(ROOT)): name for p in ours(TESTS) for name in imported(p)
                 if name.startswith("tests.") and any(part.startswith(("test_", "conftest"))
                                                      for part in name.split(".")[1:])}
    assert offenders == {}, "helpers go to tests/support, fixtures to a conftest.py"


def test_every_test_folder_is_a_package() -> None:
    folders = {p.parent for p in ours(TESTS)}
    assert [str(f.relative_to(ROOT)) for f in sorted(folders) if not (f / "__init__.py").exists()] == []


def test_the_scenario_projects_are_files_and_import_nothing_from_tests() -> None:
    projects = [p for p in sorted((TESTS / "data" / "projects").iterdir()) if p.is_dir()]
    for name in ("service_checks", "dashboard", "routing", "slow", "faults", "clashing_names"):
        assert (TESTS / "data" / "projects" / name / "gradci.toml").is_file(), name
    # A checkout's runner cannot import this repository's tests/ (a project's own tests/ is its own).
    assert [str(p) for project in projects if not (project / "tests").is_dir()
            for p in project.rglob("*.py") for name in imported(p) if name.split(".")[0] == "tests"] == []
