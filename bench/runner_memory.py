"""The runner's resident memory over the built-in library, with and without the memory ceiling.

Checks every scenario of the library (or of one ``--family``) on the CPU, every backend, float64 and
float32, one scenario per request as ``gradci check`` does, in one warm runner: first without a
ceiling, then with ``--ceiling-mb`` (default: the setting's default). A thread samples the runner's
resident memory every 0.2 s; printed: the peak, the memory after the last request, the restarts,
the wall time, and that every cell has the same status both ways.

Run: .venv/bin/python bench/runner_memory.py [--family nn] [--ceiling-mb 3000]
"""
from __future__ import annotations

import argparse
import tempfile
import threading
import time
from pathlib import Path

from gradci.services.settings import Settings
from gradci.worker.runner import CellSpec, WarmRunner

DTYPES = ("float64", "float32")


class RssSampler:
    """The largest resident memory any process the runner started had, sampled from /proc."""

    def __init__(self, runner: WarmRunner, interval_s: float = 0.2) -> None:
        self.runner, self.interval_s, self.peak_bytes = runner, interval_s, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.wait(self.interval_s):
            pid = self.runner.pid
            if pid is not None:
                self.peak_bytes = max(self.peak_bytes, resident_bytes(pid))

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()


def resident_bytes(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) << 10
    except OSError:
        pass
    return 0


def check_library(family: str | None, ceiling_mb: int) -> dict:
    with tempfile.TemporaryDirectory() as workdir:
        runner = WarmRunner(cell_timeout_s=300, workdir=Path(workdir), max_rss_mb=ceiling_mb)
        start = time.monotonic()
        statuses: dict[tuple[str, str, str], str] = {}
        with RssSampler(runner) as sampler:
            listing = runner.list_source(None, family=family)
            backends = [backend["name"] for backend in listing["backends"]]
            for scenario in listing["scenarios"]:
                dtypes = [dtype for dtype in DTYPES if dtype in scenario["dtypes"]]
                specs = [CellSpec(scenario=scenario["name"], backend=backend, device="cpu", dtype=dtype,
                                  family=family) for backend in backends for dtype in dtypes]
                for spec, cell in zip(specs, runner.run_cells(specs)):
                    statuses[(spec.scenario, spec.backend, spec.dtype)] = cell["status"]
            last = resident_bytes(runner.pid) if runner.pid else 0
        runner.close()
    return {"ceiling_mb": ceiling_mb, "cells": len(statuses), "peak_mb": sampler.peak_bytes >> 20,
            "peak_after_request_mb": runner.peak_rss_bytes >> 20, "last_mb": last >> 20, "starts": runner.starts,
            "recycles": runner.recycles, "wall_s": round(time.monotonic() - start), "statuses": statuses}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--family", default=None, help="one family of the built-in library (default: all of it)")
    parser.add_argument("--ceiling-mb", type=int, default=Settings.model_fields["runner_max_rss_mb"].default)
    args = parser.parse_args()
    results = [check_library(args.family, 0), check_library(args.family, args.ceiling_mb)]
    print(f"{'ceiling':>10} {'cells':>6} {'peak MB':>8} {'after-request peak MB':>22} {'last MB':>8} "
          f"{'starts':>7} {'recycles':>9} {'wall s':>7}", flush=True)
    for r in results:
        ceiling = f"{r['ceiling_mb']} MB" if r["ceiling_mb"] else "none"
        print(f"{ceiling:>10} {r['cells']:>6} {r['peak_mb']:>8} {r['peak_after_request_mb']:>22} {r['last_mb']:>8} "
              f"{r['starts']:>7} {r['recycles']:>9} {r['wall_s']:>7}")
    differing = [key for key, status in results[0]["statuses"].items() if results[1]["statuses"].get(key) != status]
    print(f"cells whose status differs between the two: {len(differing)} {differing[:5]}")


if __name__ == "__main__":
    main()
