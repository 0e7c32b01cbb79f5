"""What a checkout switch costs a worker: its runner is replaced when the next job is another
checkout's (one process never serves two tenants), so the job pays a runner start, the frameworks'
import and its scenario modules' import again.

Measured side by side in one run, on the same two small projects (tests/data/projects/tenant_*):
the same job on a runner that served the same checkout last (warm), and after another checkout's job.

    .venv/bin/python bench/tenant_switch.py [rounds]
"""
from __future__ import annotations

import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from gradci.worker.runner import CellSpec, WarmRunner

PROJECTS = Path(__file__).resolve().parent.parent / "tests" / "data" / "projects"


def job(runner: WarmRunner, root: Path, repository: str) -> float:
    """List the checkout's scenarios and check one cell of each, as a job does; seconds taken."""
    start = time.perf_counter()
    listing = runner.list_source(str(root), repository=repository)
    for item in listing.scenarios:
        runner.run_cells([CellSpec(scenario=item["name"], backend="torch-rev", device="cpu", dtype="float64",
                                   operator=item["operator"], framework="torch", mode="reverse", source=str(root),
                                   repository=repository)])
    return time.perf_counter() - start


def main(rounds: int) -> None:
    with tempfile.TemporaryDirectory() as folder:
        base = Path(folder)
        base.chmod(0o755)
        roots = {}
        for name in ("tenant_attacker", "tenant_victim"):
            roots[name] = base / name
            shutil.copytree(PROJECTS / name, roots[name])
        runner = WarmRunner(cell_timeout_s=300, workdir=base / "work")
        try:
            victim, other = (roots["tenant_victim"], "https://example.org/b"), (roots["tenant_attacker"],
                                                                                  "https://example.org/a")
            job(runner, *victim)  # first start, imports, compile caches: out of the figures
            warm, switched = [], []
            for _ in range(rounds):
                warm.append(job(runner, *victim))
                job(runner, *other)
                switched.append(job(runner, *victim))
        finally:
            runner.close()
    w, s = statistics.median(warm), statistics.median(switched)
    print(f"job on a warm runner of the same checkout: median {w:.2f} s (min {min(warm):.2f}, max {max(warm):.2f})")
    print(f"job after another checkout's job:           median {s:.2f} s (min {min(switched):.2f}, "
          f"max {max(switched):.2f})")
    print(f"a checkout switch costs {s - w:.2f} s per job (ratio {s / w:.1f}x), {rounds} rounds")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 5)
