"""A scenario of one framework gets no cells of the other framework's backends in ``gradci check``:
not listed as skips, only counted under the summary; and a check that checked nothing (no cell made,
or every one skipped) is not a pass. Run as a user runs it, in a subprocess."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

PROJECT = Path(__file__).parents[1] / "data" / "projects" / "suite_expectations"  # torch-only rules


def check(*flags: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-P", "-m", "gradci", "check", "--repo", str(PROJECT), "-j", "1", *flags],
                          capture_output=True, text=True, timeout=600)


def test_a_torch_only_project_lists_no_jax_cells_and_counts_them():
    done = check("--backends", "torch-rev,jax-rev,jax-fwd", "--dtypes", "float64,float32")
    assert done.returncode in (0, 1), done.stderr
    out = done.stdout
    # The backend is the first column of the summary table and the second of the failing cells'.
    backends = {cell.strip() for line in out.splitlines() if line.startswith("│") for cell in line.split("│")[1:3]}
    assert "torch-rev" in backends and not any(name.startswith("jax-") for name in backends), out
    # 2 scenarios × 2 jax backends × 2 dtypes
    assert "8 cells not made: backends of a framework the scenario gives no f for" in out, out


@pytest.mark.parametrize(("flags", "why"), [
    (("--backends", "jax-rev"), "no cell was made (2 not made"),
    (("--backends", "torch-rev", "--dtypes", "float16"), "every cell was skipped or declared failing (2); the most "
                                                         "common reason (2): the scenario does not declare float16"),
])
def test_a_check_that_checked_nothing_is_not_a_pass(flags, why):
    done = check(*flags)
    assert done.returncode == 1 and f"nothing was checked: {why}" in done.stderr, (done.stdout, done.stderr)


def test_its_twin_that_checked_a_cell_passes():
    done = check("--backends", "torch-rev", "-k", "oldstyle/*")
    assert done.returncode == 0 and "nothing was checked" not in done.stderr, (done.stdout, done.stderr)
