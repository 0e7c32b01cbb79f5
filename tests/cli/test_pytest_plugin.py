"""gradci's pytest plugin, run by pytest in a subprocess on a sample project (tests/data/projects/
pytest_sample): every cell an item with the outcome its status maps to — a crashing scenario failing
its own cells only — through -k, --junitxml and pytest-xdist's -n 2."""
from __future__ import annotations

import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # each run starts sandboxed runners that import torch and jax

SAMPLE = Path(__file__).resolve().parent.parent / "data" / "projects" / "pytest_sample"

EXPECTED = {
    "gradci.toml::sample/right[torch-rev-cpu-float64]": "passed",
    "gradci.toml::sample/right[torch-fwd-cpu-float64]": "passed",
    "gradci.toml::sample/wrong[torch-rev-cpu-float64]": "failed",
    "gradci.toml::sample/wrong[torch-fwd-cpu-float64]": "failed",
    "gradci.toml::sample/known[torch-rev-cpu-float64]": "xfailed",
    "gradci.toml::sample/known[torch-fwd-cpu-float64]": "xfailed",
    "gradci.toml::sample/fixed[torch-rev-cpu-float64]": "failed",      # xpass is strict
    "gradci.toml::sample/fixed[torch-fwd-cpu-float64]": "passed",
    "gradci.toml::sample/skipped[torch-rev-cpu-float64]": "passed",
    "gradci.toml::sample/skipped[torch-fwd-cpu-float64]": "skipped",
    "gradci.toml::sample/crash[torch-rev-cpu-float64]": "failed",      # a segfault: its cells, not the run
    "gradci.toml::sample/crash[torch-fwd-cpu-float64]": "failed",
    "tests/test_beside.py::test_an_ordinary_test": "passed",
    "tests/test_beside.py::beside_scenarios::beside/tanh[torch-rev-cpu-float64]": "passed",
}


@pytest.fixture
def sample(tmp_path: Path) -> Path:
    root = tmp_path / "sample"
    shutil.copytree(SAMPLE, root)
    return root


def run_pytest(root: Path, *args: str) -> tuple[subprocess.CompletedProcess, dict[str, tuple[str, str]]]:
    report = root / "junit.xml"
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rA",
                           f"--junitxml={report}", *args], cwd=root, capture_output=True, text=True, timeout=600)
    return done, outcomes(report)


def outcomes(report: Path) -> dict[str, tuple[str, str]]:
    """node id → (outcome, text) from pytest's junit.xml."""
    found = {}
    for case in ET.parse(report).getroot().iter("testcase"):
        path = case.get("classname", "").replace(".", "/")
        name = case.get("name", "")
        node = f"{path.removesuffix('/toml')}.toml::{name}" if path.endswith("gradci/toml") or path == "gradci/toml" \
            else f"{path}.py::{name}"
        child = next((c for c in case if c.tag in ("failure", "error", "skipped")), None)
        kind = "passed" if child is None else child.tag
        if kind == "skipped" and (child.get("type") == "pytest.xfail"):
            kind = "xfailed"
        elif kind in ("failure", "error"):
            kind = "failed"
        found[node] = (kind, (child.get("message", "") + (child.text or "")) if child is not None else "")
    return found


def by_id(found: dict[str, tuple[str, str]], node: str) -> tuple[str, str]:
    """junit's classname folds the path's slashes into dots: match on the item's name and file."""
    name = node.split("::")[-1]
    matches = [value for key, value in found.items() if key.endswith("::" + name)
               and Path(node.split("::")[0]).stem in key]
    assert len(matches) == 1, (node, sorted(found))
    return matches[0]


def test_every_cell_is_an_item_with_its_outcome(sample: Path):
    done, found = run_pytest(sample, "--gradci")
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]  # failures, not a crashed session
    for node, outcome in EXPECTED.items():
        assert by_id(found, node)[0] == outcome, (node, by_id(found, node), done.stdout[-3000:])
    wrong = by_id(found, "gradci.toml::sample/wrong[torch-rev-cpu-float64]")[1]
    assert "beyond tolerance" in wrong and "reference: finite differences" in wrong and "rtol" in wrong
    assert "SIGSEGV" in by_id(found, "gradci.toml::sample/crash[torch-rev-cpu-float64]")[1]
    assert "no longer fails" in by_id(found, "gradci.toml::sample/fixed[torch-rev-cpu-float64]")[1]


def test_without_the_flag_only_the_decorated_scenarios_are_collected(sample: Path):
    done, found = run_pytest(sample, "-k", "tanh and torch-rev or ordinary")
    assert done.returncode == 0, done.stdout[-3000:]
    assert not any("sample/" in node for node in found)
    assert by_id(found, "tests/test_beside.py::beside_scenarios::beside/tanh[torch-rev-cpu-float64]")[0] == "passed"


def test_selection_flags_minus_k_and_two_xdist_workers(sample: Path):
    pytest.importorskip("xdist")
    done, found = run_pytest(sample, "--gradci", "--gradci-backends", "torch-rev", "-k", "sample and not crash",
                             "-n", "2")
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    assert all("torch-rev" in node for node in found), sorted(found)
    assert {node.split("::")[-1] for node in found} == {
        "sample/right[torch-rev-cpu-float64]", "sample/wrong[torch-rev-cpu-float64]",
        "sample/known[torch-rev-cpu-float64]", "sample/fixed[torch-rev-cpu-float64]",
        "sample/skipped[torch-rev-cpu-float64]"}
    assert by_id(found, "gradci.toml::sample/known[torch-rev-cpu-float64]")[0] == "xfailed"


def test_exit_first_stops_at_the_first_failing_cell(sample: Path):
    done, found = run_pytest(sample, "--gradci", "-x", "-k", "wrong or right")
    assert done.returncode == 1
    assert sum(1 for outcome, _ in found.values() if outcome == "failed") == 1
