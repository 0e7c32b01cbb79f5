"""The demo's speed from a cold start, as a newcomer meets it (not a timed test; the machine is shared).

Runs ``gradci up --demo --exit`` embedded (SQLite, no servers) in a fresh working folder, so JAX's
persistent compilation cache (``<workdir>/runner/jax-cache``) starts empty, and prints, counted from
the command's start: when the neural-network family's run had finished (target ≤ 2 min on 2 cores)
and when the whole library had (target ≤ 8 min), with the load average beside them — other work on
the machine slows every figure. ``--check`` also times ``gradci check`` on the whole library, cold,
afterwards.

Run: .venv/bin/python bench/demo.py [--check] [--keep]
"""
from __future__ import annotations

import argparse
import os
import re
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FINISHED = re.compile(r"demo: run (\d+) finished")
SUBMITTED = re.compile(r"demo: run (\d+) \(([^)]*)\) submitted")
TIMEOUT_S = 40 * 60


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def load() -> str:
    return " ".join(f"{average:.2f}" for average in os.getloadavg())


def cold_environment(folder: Path) -> dict[str, str]:
    """A newcomer's environment: embedded service, every cache in ``folder``."""
    env = {name: value for name, value in os.environ.items()
           if not name.startswith("GRADCI_") and name != "XLA_FLAGS"}
    return {**env, "GRADCI_WORKDIR": str(folder / "gradci"), "XDG_CACHE_HOME": str(folder / "cache"),
            "COLUMNS": "200"}  # one line per message in the log, however long


def time_demo(folder: Path) -> dict[str, tuple[float, str]]:
    """Seconds from ``gradci up --demo`` starting to each demo run's summary, and the load average
    then, keyed by the run's scenarios (the log is watched: each figure is when its end was printed)."""
    log = folder / "up.log"
    finished: dict[str, tuple[float, str]] = {}
    start = time.monotonic()
    with open(log, "wb") as output:
        up = subprocess.Popen([sys.executable, "-m", "gradci", "up", "--demo", "--exit", "--port", str(free_port())],
                              cwd=folder, env=cold_environment(folder), stdout=output, stderr=subprocess.STDOUT)
        while time.monotonic() - start < TIMEOUT_S:
            running = up.poll() is None
            text = log.read_text(errors="replace")
            scenarios = dict(SUBMITTED.findall(text))
            for run_id in FINISHED.findall(text):
                finished.setdefault(scenarios.get(run_id, run_id), (time.monotonic() - start, load()))
            if not running:
                break
            time.sleep(0.5)
        if up.poll() is None:
            up.terminate()
            up.wait(timeout=30)
    text = log.read_text(errors="replace")
    if len(finished) < len(SUBMITTED.findall(text)) or not finished:
        print(text[-3000:])
        raise SystemExit(f"gradci up --demo exited with {up.returncode} before its runs finished; see {log}")
    if up.returncode != 0:  # the runs finished: the timing stands, the failing cells are shown below
        print(f"gradci up --demo exited with {up.returncode}: a run has failing cells")
    for line in text.splitlines():  # the runs' summaries as the demo printed them
        if line.startswith("demo:") or "│" in line:
            print("   ", line)
    return finished


def cpu_seconds() -> float:
    """User and system time of the finished children and theirs (every process waits for its own)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def time_check(folder: Path) -> float:
    start = time.monotonic()
    subprocess.run([sys.executable, "-m", "gradci", "check", "--format", "json", "-o", str(folder / "check.json")],
                   cwd=ROOT, env=cold_environment(folder), stdout=subprocess.DEVNULL, check=False)
    return time.monotonic() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="also time gradci check on the library, cold")
    parser.add_argument("--keep", action="store_true", help="keep the working folder (logs, database)")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="gradci-demo-bench-"))
    try:
        print(f"cores {os.cpu_count()}; load before {load()}")
        for scenarios, (seconds, load_then) in time_demo(folder).items():
            print(f"demo run of {scenarios}: finished {seconds:.0f} s ({seconds / 60:.1f} min) after "
                  f"`gradci up --demo` started, cold; load {load_then}")
        print(f"CPU time of the demo's processes: {cpu_seconds():.0f} s (÷ {os.cpu_count()} cores: the least "
              f"wall time an otherwise idle machine could take)")
        if args.check:
            check_folder = folder / "check"
            check_folder.mkdir()
            print(f"gradci check, whole library, cold: {time_check(check_folder):.0f} s; load {load()}")
    finally:
        if args.keep:
            print(f"kept {folder}")
        else:
            shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
