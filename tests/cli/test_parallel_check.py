"""``gradci check -j N`` checks in N sandboxed runners at once and produces exactly the cells of
``-j 1``: the same cells in the same order, the same statuses, the same references."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # two full checks of a family, in several runners

SELECTION = ["--family", "elementary", "-k", "elementary/s*", "--backends", "torch-rev,jax-rev,fd",
             "--dtypes", "float64,float32"]


def check(tmp_path: Path, jobs: int) -> list[dict]:
    out = tmp_path / f"j{jobs}.json"
    done = subprocess.run([sys.executable, "-m", "gradci", "check", *SELECTION, "-j", str(jobs), "--format", "json",
                           "-o", str(out)], capture_output=True, text=True, timeout=900)
    assert done.returncode in (0, 1), done.stderr[-2000:]
    return json.loads(out.read_text())


def test_two_runners_produce_exactly_the_cells_of_one(tmp_path: Path) -> None:
    one, two = check(tmp_path, 1), check(tmp_path, 2)
    key = ("scenario", "backend", "device", "dtype")
    assert [tuple(c[k] for k in key) for c in one] == [tuple(c[k] for k in key) for c in two]
    assert len({c["scenario"] for c in one}) > 4  # several functions, so that both runners had work
    for a, b in zip(one, two):
        assert (a["status"], a["reference"], a["reference_error"], a["message"]) == \
               (b["status"], b["reference"], b["reference_error"], b["message"]), (a, b)


def test_minus_j_zero_is_a_usage_error() -> None:
    done = subprocess.run([sys.executable, "-m", "gradci", "check", "-j", "0"], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 2 and "-j must be a whole number of at least 1" in done.stderr
