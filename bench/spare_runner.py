"""A pull request's first request to a worker process: a cold runner against a spare one, side by side.

The repository is the torchdiffeq copy of ``bench.affected_project`` (its commit checked out as a
worker checks one out). Per round, in turn:

- cold: a new runner (as a worker process without a spare starts one) lists the checkout's scenarios
  with its rules, then checks the two cells of one adjoint scenario (torch-rev, float64 and float32);
- spare: a runner that kept a spare (``WarmRunner.keep_spare``, started before the round's clock and
  left to warm as a worker's waits between tasks) does the same: the spare is taken by the listing.

Both in the real box (bubblewrap; root gives each its uid and cgroup). The time is from the first
request to the last cell; the spare's own start is not in it, as a worker's is not in a pull
request's wait. Printed: each round's pair and the medians' ratio.

Run: .venv/bin/python -m bench.spare_runner [--rounds N]
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

SCENARIO = "odeint_adjoint/dopri5/linear"
SPARE_WARM_S = 30.0  # how long a spare gets to warm before its round: a worker's idle wait between tasks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="pairs of cold and spare (default 3)")
    args = parser.parse_args()
    from bench import affected_project
    from gradci.worker.runner import WarmRunner
    from gradci.worker.sandbox import SandboxPolicy

    folder = Path(tempfile.mkdtemp(prefix="gradci-bench-spare-"))
    sha = affected_project.make_repository(folder / "repo.git")
    checkout = folder / "checkouts" / sha
    subprocess.run(["git", "clone", "-q", str(folder / "repo.git"), str(checkout)], check=True)
    subprocess.run(["git", "-C", str(checkout), "checkout", "-q", sha], check=True)
    times: dict[str, list[float]] = {"cold": [], "spare": []}
    for number in range(1, args.rounds + 1):
        for kind in ("cold", "spare"):
            runner = WarmRunner(cell_timeout_s=600, workdir=folder / f"work-{kind}-{number}", sandbox=SandboxPolicy())
            try:
                if kind == "spare":
                    runner.keep_spare(["torch-rev", "fd"])
                    time.sleep(SPARE_WARM_S)
                seconds = _first_request(runner, str(checkout))
                assert (runner.spares_taken == 1) == (kind == "spare")
            finally:
                runner.close()
                runner.close_spare()
            times[kind].append(seconds)
            print(f"round {number} {kind}: {seconds:.2f} s (load average {os.getloadavg()[0]:.1f})", flush=True)
    cold, spare = statistics.median(times["cold"]), statistics.median(times["spare"])
    print(f"median: cold {cold:.2f} s, spare {spare:.2f} s = {spare / cold:.2f} × cold")


def _first_request(runner: object, source: str) -> float:
    """Seconds to list ``source`` with its rules and check one scenario's two cells."""
    from gradci.worker.runner import CellSpec, WarmRunner

    assert isinstance(runner, WarmRunner)
    start = time.perf_counter()
    listing = runner.list_source(source, repository="bench/torchdiffeq", trusted=False, rules=True)
    (item,) = [s for s in listing.scenarios if s["name"] == SCENARIO]
    specs = [CellSpec(scenario=SCENARIO, backend="torch-rev", device="cpu", dtype=dtype, operator=item["operator"],
                      framework="torch", mode="reverse", source=source, repository="bench/torchdiffeq")
             for dtype in ("float64", "float32")]
    cells = runner.run_cells(specs, options={"rule_coverage": True})
    assert [cell["status"] for cell in cells] == ["pass", "pass"], cells
    return time.perf_counter() - start


if __name__ == "__main__":
    main()
