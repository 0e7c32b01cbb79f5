"""What the runner's box costs: a cold runner (start, frameworks' import, listing) and the cells of
the built-in library's neural-network family, boxed (bubblewrap, a fresh uid and a cgroup, as
workers run as root) and unboxed (the same runner as a plain subprocess), alternating in one run.

    .venv/bin/python bench/box.py [rounds]

Prints each round's seconds and the ratio boxed ÷ unboxed of the medians, for the start alone and
for the whole family (the demo's cold neural-network run, without the service around it).
"""
from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

from gradci.worker.runner import CellSpec, WarmRunner
from gradci.worker.sandbox import SandboxPolicy, bubblewrap

FAMILY = "nn"


def cold_family(workdir: Path, policy: SandboxPolicy) -> tuple[float, float]:
    """(seconds to the first listing, seconds for the whole family) of a fresh runner."""
    runner = WarmRunner(cell_timeout_s=300, workdir=workdir, sandbox=policy)
    try:
        start = time.perf_counter()
        listing = runner.list_source(None, family=FAMILY)
        listed = time.perf_counter() - start
        for item in listing.scenarios:
            runner.run_cells([CellSpec(scenario=item["name"], backend=backend, device="cpu", dtype="float32",
                                       family=FAMILY) for backend in ("torch-rev", "jax-rev")])
        return listed, time.perf_counter() - start
    finally:
        runner.close()


def main(rounds: int) -> None:
    print(f"bubblewrap: {bubblewrap()}")
    policies = {"boxed": SandboxPolicy(memory_limit_mb=8192, scratch_mb=1024),
                "unboxed": SandboxPolicy(memory_limit_mb=8192, scratch_mb=1024, unsandboxed=True)}
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in policies}
    with tempfile.TemporaryDirectory() as folder:
        for round_ in range(rounds):
            for name, policy in (policies.items() if round_ % 2 == 0 else reversed(policies.items())):
                times[name].append(cold_family(Path(folder) / name, policy))
                print(f"round {round_}: {name:8s} listed {times[name][-1][0]:6.2f} s, family {times[name][-1][1]:6.2f} s")
    for index, what in enumerate(("start and listing", f"whole {FAMILY} family")):
        boxed = statistics.median(t[index] for t in times["boxed"])
        unboxed = statistics.median(t[index] for t in times["unboxed"])
        print(f"{what}: boxed {boxed:.2f} s, unboxed {unboxed:.2f} s, ratio {boxed / unboxed:.3f}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 3)
