"""`gradci check` as a user runs it: a real subprocess on a repository with a gradci.toml."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

# Each test runs `gradci check` as a subprocess: about ten seconds apiece.
pytestmark = pytest.mark.slow

GRADCI = [sys.executable, "-m", "gradci"]

SCENARIOS = '''
import numpy as np
from gradci import Scenario, namespace

def scenarios():
    def square(x):
        return namespace(x).sum(x * x)
    def bad_square(x):
        return namespace(x).sum(x * x)
    return [
        Scenario("square/gradient", "gradient", square, np.array([1.0, 2.0])),
        Scenario("cube/derivative", "derivative", lambda x: x ** 3, 2.0, reference=np.array(12.0)),
        Scenario("wrong/derivative", "derivative", lambda x: x ** 3, 2.0, reference=np.array(13.0)),
    ]
'''


def make_repo(root: Path, toml: str, module: str = SCENARIOS) -> Path:
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "__init__.py").write_text("")
    (root / "pkg" / "scen.py").write_text(module)
    (root / "gradci.toml").write_text(textwrap.dedent(toml))
    return root


def gradci(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([*GRADCI, *args], capture_output=True, text=True, timeout=300, cwd=cwd)


TOML = """
[scenarios]
modules = ["pkg.scen"]
[matrix]
backends = ["torch-rev", "jax-rev-jit"]
dtypes = ["float64"]
"""


def test_passing_selection_exits_zero_and_prints_summary(tmp_path):
    repo = make_repo(tmp_path, TOML)
    out = gradci("check", "--repo", str(repo), "-k", "square")
    assert out.returncode == 0, out.stderr
    assert "torch-rev" in out.stdout and "coverage 100.0%" in out.stdout


def test_failing_cell_exits_one_and_is_listed(tmp_path):
    repo = make_repo(tmp_path, TOML)
    out = gradci("check", "--repo", str(repo))
    assert out.returncode == 1
    assert "wrong/derivative" in out.stdout and "failing cells" in out.stdout


def test_json_has_every_cell_field_and_flags_override_the_matrix(tmp_path):
    repo = make_repo(tmp_path, TOML)
    out = gradci("check", "--repo", str(repo), "--format", "json", "--backends", "fd", "-k", "cube*")
    cells = json.loads(out.stdout)
    assert out.returncode == 0
    assert [c["backend"] for c in cells] == ["fd"]
    assert set(cells[0]) == {"scenario", "operator", "framework", "backend", "mode", "device", "dtype", "status",
                             "max_abs_err", "max_rel_err", "atol", "rtol", "time_ms", "first_call_ms",
                             "peak_memory_bytes", "message", "warnings", "reference", "reference_error",
                             "precision", "repeat_spread", "reference_ms", "import_ms", "detail",
                             "depends", "rule_coverage"}  # its records: what it read, which rules it ran


def test_junit_output_file(tmp_path):
    repo = make_repo(tmp_path, TOML)
    target = tmp_path / "report.xml"
    out = gradci("check", "--repo", str(repo), "--format", "junit", "-o", str(target))
    assert out.returncode == 1
    root = ET.parse(target).getroot()
    failures = sum(int(s.get("failures")) for s in root.iter("testsuite"))
    assert failures == 2  # wrong/derivative on both backends


@pytest.mark.parametrize("toml, module, needle", [
    ("[scenarios\nmodules = 1", SCENARIOS, "invalid TOML"),
    ("[scenarios]\nmodules = []", SCENARIOS, "modules must be"),
    (TOML, "import not_a_module_anywhere\n", "cannot import scenario module"),
    (TOML, "def scenarios():\n    raise ValueError('nope')\n", "scenarios() failed"),
    (TOML.replace("dtypes", "colours"), SCENARIOS, "[matrix]: unknown keys ['colours']"),
])
def test_broken_project_is_one_line_and_exit_two(tmp_path, toml, module, needle):
    repo = make_repo(tmp_path, toml, module)
    out = gradci("check", "--repo", str(repo))
    assert out.returncode == 2
    assert needle in out.stderr and "Traceback" not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1


def test_unknown_backend_is_a_usage_error(tmp_path):
    repo = make_repo(tmp_path, TOML)
    out = gradci("check", "--repo", str(repo), "--backends", "tensorflow")
    assert out.returncode == 2 and "unknown backend" in out.stderr
