"""A scenario of one framework gets no cells of the other framework's backends in ``gradci check``:
not listed as skips, only counted under the summary. Run as a user runs it, in a subprocess."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

PROJECT = Path(__file__).parents[1] / "data" / "projects" / "suite_expectations"  # torch-only rules


def test_a_torch_only_project_lists_no_jax_cells_and_counts_them():
    done = subprocess.run([sys.executable, "-P", "-m", "gradci", "check", "--repo", str(PROJECT), "--backends",
                           "torch-rev,jax-rev,jax-fwd", "--dtypes", "float64,float32", "-j", "1"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode in (0, 1), done.stderr
    out = done.stdout
    assert "torch-rev" in out and "jax-rev" not in out and "jax-fwd" not in out, out
    # 2 scenarios × 2 jax backends × 2 dtypes
    assert "8 cells not made: backends of a framework the scenario gives no f for" in out, out
