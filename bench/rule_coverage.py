"""The cost of rule coverage (issue 31): ``gradci check`` with it (the default) against ``--no-rules``.

The project is tests/data/projects/rule_coverage (torch autograd.Functions with backward and jvp, a
jax.custom_vjp behind a module-level jax.jit) with more scenarios over its rules at several sizes,
checked on every default backend, float64 and float32, the CPU, one runner, with a fresh
XDG_CACHE_HOME each run. JAX's persistent compilation cache is gradci's own (GRADCI_JAX_CACHE_DIR,
~/.cache/gradci/jax by default), warm after the first run as a user's or a worker's is: set it to
"off" for cold compiles throughout. Printed side by side, per round: the two walls and their
ratio, and the cells' own time summed (first call plus steady state, as each cell reports it) and its
ratio. It stops with an error when the two runs' cells differ in status or message: coverage must
never change a verdict, and a ratio must compare the same work. Target: the wall within 15 %.

Run: .venv/bin/python bench/rule_coverage.py [--rounds N]
Rounds alternate which of the two goes first, so that neither always meets a warmer machine.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROJECT = ROOT / "tests" / "data" / "projects" / "rule_coverage"
MORE = '''
import numpy as np
import jax.numpy as jnp
from gradci import Scenario
from rulecov.ops import Cube, Square, jcube, jitted_cube_sum


def scenarios():
    found = []
    for n in (3, 8, 16, 32, 64):
        x = np.linspace(0.2, 1.5, n)
        found += [
            Scenario(f"more/cube-{n}", "gradient", {"torch": lambda v: Cube.apply(v).sum(), "jax": jitted_cube_sum}, x,
                     dtypes=("float64", "float32")),
            Scenario(f"more/square-{n}", "gradient", {"torch": lambda v: (Square.apply(v) * v).sum()}, x,
                     dtypes=("float64", "float32")),
            Scenario(f"more/jcube-{n}", "jacobian", {"jax": lambda v: jnp.tanh(jcube(v))}, x,
                     dtypes=("float64", "float32")),
        ]
    return found
'''
KEY = ("scenario", "backend", "device", "dtype")


def load() -> str:
    return " ".join(f"{average:.2f}" for average in os.getloadavg())


def make_project(folder: Path) -> Path:
    root = folder / "project"
    shutil.copytree(PROJECT, root)
    (root / "rulecov" / "more.py").write_text(MORE)
    (root / "gradci.toml").write_text('[scenarios]\nmodules = ["rulecov.scenarios", "rulecov.more"]\n'
                                      '[rules]\nunexercised = "warning"\n')
    return root


def timed_check(root: Path, rules: bool) -> tuple[float, list[dict]]:
    """The wall of one ``gradci check`` and the cells it reported."""
    folder = Path(tempfile.mkdtemp(prefix="gradci-rules-bench-"))
    try:
        env = {**{name: value for name, value in os.environ.items() if not name.startswith("GRADCI_") or name == "GRADCI_JAX_CACHE_DIR"},
               "XDG_CACHE_HOME": str(folder / "cache")}
        report = folder / "cells.json"
        command = [sys.executable, "-m", "gradci", "check", "--repo", str(root), "-j", "1", "--devices", "cpu",
                   "--format", "json", "-o", str(report), *([] if rules else ["--no-rules"])]
        start = time.monotonic()
        done = subprocess.run(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                              check=False)
        wall = time.monotonic() - start
        if not report.exists():
            raise SystemExit(f"gradci check wrote no report (exit {done.returncode}):\n{done.stderr[-3000:]}")
        return wall, json.loads(report.read_text())
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def cell_seconds(cells: list[dict]) -> float:
    return sum((cell.get("first_call_ms") or 0.0) + (cell.get("time_ms") or 0.0) for cell in cells) / 1e3


def same_verdicts(a: list[dict], b: list[dict]) -> None:
    def verdicts(cells: list[dict]) -> dict:
        return {tuple(cell[k] for k in KEY): (cell["status"], cell["message"]) for cell in cells}

    first, second = verdicts(a), verdicts(b)
    if first != second:
        differing = [key for key in first if first[key] != second.get(key)]
        raise SystemExit(f"the runs' verdicts differ at {differing[:5]}: coverage changed a verdict")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="gradci-rules-project-"))
    try:
        root = make_project(folder)
        walls: dict[bool, list[float]] = {True: [], False: []}
        cells: dict[bool, list[float]] = {True: [], False: []}
        for number in range(args.rounds):
            order = (True, False) if number % 2 == 0 else (False, True)
            got = {}
            for rules in order:
                wall, found = timed_check(root, rules)
                walls[rules].append(wall)
                cells[rules].append(cell_seconds(found))
                got[rules] = found
            same_verdicts(got[True], got[False])
            print(f"round {number + 1}: {len(got[True])} cells; wall {walls[True][-1]:.1f} s with rules, "
                  f"{walls[False][-1]:.1f} s without: {walls[True][-1] / walls[False][-1]:.3f}; cells' own time "
                  f"{cells[True][-1]:.2f} s / {cells[False][-1]:.2f} s: {cells[True][-1] / cells[False][-1]:.3f}; "
                  f"load {load()}", flush=True)
        ratios = [a / b for a, b in zip(walls[True], walls[False])]
        cell_ratios = [a / b for a, b in zip(cells[True], cells[False])]
        print(f"median wall ratio {statistics.median(ratios):.3f} (target ≤ 1.15); median cells' own time ratio "
              f"{statistics.median(cell_ratios):.3f}")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
