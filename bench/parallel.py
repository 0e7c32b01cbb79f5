"""``gradci check -j 2`` against ``-j 1`` on the whole built-in library (issue 21, item 1): every
backend (jax-rev included), float64 and float32, the CPU, JAX's compilation cache cold for each run
(a fresh XDG_CACHE_HOME). Not a timed test: it prints the two walls, their ratio and the load
average beside them, and stops with an error when the two runs did not produce the same cells with
the same statuses and references — a ratio must compare the same work.

Run: .venv/bin/python bench/parallel.py [--rounds N] [-k PATTERN]
Rounds alternate which of the two goes first, so that neither always meets a warmer machine.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from gradci.scenarios.backends import backend_names

ROOT = Path(__file__).resolve().parent.parent
KEY = ("scenario", "backend", "device", "dtype")
COMPARED = ("status", "reference", "reference_error", "message")  # as tests/cli/test_parallel_check.py


def load() -> str:
    return " ".join(f"{average:.2f}" for average in os.getloadavg())


def timed_check(jobs: int, pattern: str | None) -> tuple[float, list[dict]]:
    """The wall of one cold ``gradci check -j jobs`` and the cells it reported."""
    folder = Path(tempfile.mkdtemp(prefix="gradci-parallel-bench-"))
    try:
        env = {**{name: value for name, value in os.environ.items() if not name.startswith("GRADCI_")},
               "XDG_CACHE_HOME": str(folder / "cache")}
        report = folder / "cells.json"
        command = [sys.executable, "-m", "gradci", "check", "-j", str(jobs), "--backends", ",".join(backend_names()),
                   "--dtypes", "float64,float32", "--format", "json", "-o", str(report),
                   *(["-k", pattern] if pattern else [])]
        start = time.monotonic()
        done = subprocess.run(command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              text=True, check=False)
        wall = time.monotonic() - start
        if not report.exists():
            raise SystemExit(f"gradci check -j {jobs} wrote no report (exit {done.returncode}):\n{done.stderr[-3000:]}")
        return wall, json.loads(report.read_text())
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def by_key(cells: list[dict]) -> dict[tuple, tuple]:
    return {tuple(cell[name] for name in KEY): tuple(cell[name] for name in COMPARED) for cell in cells}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("-k", dest="pattern", help="only these scenarios (for a quick try; the target is the library)")
    args = parser.parse_args()
    print(f"cores {os.cpu_count()}; load before {load()}; backends {','.join(backend_names())}")
    for round_number in range(args.rounds):
        walls: dict[int, float] = {}
        cells: dict[int, dict[tuple, tuple]] = {}
        for jobs in ((1, 2) if round_number % 2 == 0 else (2, 1)):
            walls[jobs], reported = timed_check(jobs, args.pattern)
            cells[jobs] = by_key(reported)
            print(f"round {round_number + 1}: -j {jobs}: {walls[jobs]:.0f} s, {len(reported)} cells; load {load()}",
                  flush=True)
        if cells[1] != cells[2]:
            differing = sorted(key for key in cells[1].keys() | cells[2].keys() if cells[1].get(key) != cells[2].get(key))
            raise SystemExit(f"-j 1 and -j 2 differ in {len(differing)} cells, e.g. "
                             + "; ".join(f"{key}: {cells[1].get(key)} vs {cells[2].get(key)}" for key in differing[:5]))
        print(f"round {round_number + 1}: -j 1 ÷ -j 2 = {walls[1] / walls[2]:.2f} (target ≥ 1.7); the same "
              f"{len(cells[1])} cells, statuses and references")


if __name__ == "__main__":
    main()
