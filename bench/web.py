"""The dashboard's server time on PostgreSQL: a pull-request run of 20,000 cells and its base, and a
scenario checked by 500 runs, served by the real app (uvicorn) over HTTP; prints the p95 of each
page, the run page's last as ``run page p95: N ms for 20000 cells`` (target: N ≤ 300). A running copy
of the run shows what the live page's poll costs: unchanged since the token it sent, from another tab
(same state, shared layout), and after a new cell landed (layout worked out again).

Run: .venv/bin/python bench/web.py [--cells N] [--history-runs N] [--samples N] [--admin-url URL]
It creates a database of its own in the cluster behind --admin-url and drops it at the end.
"""
from __future__ import annotations

import argparse
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import httpx
from sqlalchemy import func, select, text

from bench.big_run import ADMIN_URL, fill, p95
from gradci._testing.big_runs import BigRun
from gradci._testing.databases import scratch_database
from gradci._testing.served_app import served_app
from gradci.services.db.models import Result, Run
from gradci.services.db.runs import create_run
from gradci.services.db.session import engine_for, session_scope
from gradci.services.reports.history import MAX_RUNS_SHOWN, RUNS_SHOWN
from gradci.web.run_page import run_progress

ROOT = Path(__file__).resolve().parent.parent

# A copy of the head run's cells of one scenario, its errors and times drifting from run to run.
_HISTORY_CELLS = """
INSERT INTO results (run_id, scenario, operator, framework, backend, mode, device, dtype, status, max_abs_err,
                     max_rel_err, atol, rtol, time_ms, first_call_ms, peak_memory_bytes, message, fingerprint, created_at)
SELECT :run_id, scenario, operator, framework, backend, mode, device, dtype, status, max_abs_err * :drift,
       max_rel_err * :drift, atol, rtol, time_ms * :drift, first_call_ms, peak_memory_bytes, message, fingerprint, now()
FROM results WHERE run_id = :source AND scenario = :scenario
"""


def fill_history(url: str, big: BigRun, scenario: str, runs: int) -> None:
    """``runs`` earlier finished runs of the repository that each checked ``scenario``."""
    start = time.perf_counter()
    with session_scope(url) as session:
        for index in range(runs):
            run = create_run(session, head_sha=f"{index:040x}")
            run.status = "passed"
            session.flush()
            session.execute(text(_HISTORY_CELLS), {"run_id": run.id, "source": big.head_id, "scenario": scenario,
                                                   "drift": 1 + (index % 10) / 10})
    with engine_for(url).connect().execution_options(isolation_level="AUTOCOMMIT") as connection:
        connection.exec_driver_sql("VACUUM ANALYZE results, runs")
    print(f"stored {runs} more runs of {scenario} in {time.perf_counter() - start:.0f} s", flush=True)


# A running copy of the head run's cells; and one more cell of it, as a job streams them.
_RUNNING_CELLS = """
INSERT INTO results (run_id, scenario, operator, framework, backend, mode, device, dtype, status, max_abs_err,
                     max_rel_err, atol, rtol, time_ms, first_call_ms, peak_memory_bytes, message, fingerprint, created_at)
SELECT :run_id, scenario || :suffix, operator, framework, backend, mode, device, dtype, status, max_abs_err,
       max_rel_err, atol, rtol, time_ms, first_call_ms, peak_memory_bytes, message, fingerprint, now()
FROM results WHERE run_id = :source {only}
"""


def running_copy(url: str, big: BigRun) -> int:
    """A run still running, with the head run's cells: what a live page polls."""
    with session_scope(url) as session:
        run = create_run(session, head_sha="2" * 40)
        run.status = "running"
        session.flush()
        session.execute(text(_RUNNING_CELLS.format(only="")), {"run_id": run.id, "source": big.head_id, "suffix": ""})
    # As autovacuum would soon after a bulk insert: the planner's statistics must see these rows, or
    # the other pages' joins (compare: 495 ms p95 instead of 71) are planned for a table a third smaller.
    with engine_for(url).connect().execution_options(isolation_level="AUTOCOMMIT") as connection:
        connection.exec_driver_sql("ANALYZE results")
    return run.id


def one_more_cell(url: str, run_id: int, source: int) -> None:
    with session_scope(url) as session:
        suffix = f"/late_{session.scalar(select(func.count()).where(Result.run_id == run_id))}"
        first = "AND id = (SELECT min(id) FROM results WHERE run_id = :source)"
        session.execute(text(_RUNNING_CELLS.format(only=first)), {"run_id": run_id, "source": source, "suffix": suffix})


def cpu_seconds(pid: int) -> float:
    """The CPU time (user + system) process ``pid`` has used: what its requests cost it whatever else
    runs on the machine (a shared machine's load stretches wall times, not this)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def timed(client: httpx.Client, path: str, samples: int, server_pid: int,
          between: Callable[[], object] | None = None) -> tuple[list[float], float]:
    """``samples`` times of GET ``path`` and the server's mean CPU time per request; ``between()``
    runs, untimed, before each."""
    times, cpu = [], 0.0
    for _ in range(samples):
        if between:
            between()
        start, start_cpu = time.perf_counter(), cpu_seconds(server_pid)
        client.get(path).raise_for_status()
        times.append(time.perf_counter() - start)
        cpu += cpu_seconds(server_pid) - start_cpu
    return times, cpu / samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", type=int, default=20_000, help="cells of the run (and of its base)")
    parser.add_argument("--history-runs", type=int, default=500, help="runs that checked the scenario")
    parser.add_argument("--samples", type=int, default=30)
    parser.add_argument("--admin-url", default=ADMIN_URL)
    args = parser.parse_args()
    with scratch_database(args.admin_url, "gradci_bench_web") as url:
        big = fill(url, args.cells)
        with session_scope(url, readonly=True) as session:
            failing = session.scalar(select(Result).where(Result.run_id == big.head_id, Result.status == "fail")
                                     .order_by(Result.id).limit(1))
            cell_id, scenario = failing.id, failing.scenario
        fill_history(url, big, scenario, args.history_runs)
        running = running_copy(url, big)
        head, base = big.head_id, big.base_id
        with session_scope(url, readonly=True) as session:
            token = run_progress(session, session.get(Run, running)).token
        # (name, path, what runs untimed before each request)
        pages: list[tuple[str, str, Callable[[], object] | None]] = [
            ("runs page", "/", None),
            ("run page, filtered (status=fail)", f"/runs/{head}?status=fail", None),
            ("run page, second heatmap page", f"/runs/{head}?page=2", None),
            ("live.json, running run, unchanged", f"/runs/{running}/live.json?since={token}", None),
            ("live.json, running run, another tab", f"/runs/{running}/live.json", None),
            ("live.json, running run, a cell more", f"/runs/{running}/live.json",
             lambda: one_more_cell(url, running, head)),
            ("cell page", f"/runs/{head}/cells/{cell_id}", None),
            ("compare (base → head)", f"/runs/{base}/compare/{head}", None),
            (f"scenario history (last {RUNS_SHOWN} of {args.history_runs + 2} runs)", f"/scenarios/{scenario}", None),
            (f"scenario history (all {args.history_runs + 2} runs)", f"/scenarios/{scenario}?runs={MAX_RUNS_SHOWN}",
             None),
            ("badge", "/badge/big/run.svg", None),
            ("run page", f"/runs/{head}", None),
        ]
        with tempfile.TemporaryDirectory() as logs, served_app(url, Path(logs)) as app, \
                httpx.Client(base_url=app.url, timeout=120) as client:
            client.get(f"/runs/{base}").raise_for_status()  # imports, templates and the pool: no request's cost
            print(f"\nDashboard, PostgreSQL, one uvicorn process; {args.cells:,} cells in the run and its base")
            print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; server CPU: the uvicorn "
                  "process's mean CPU time per request")
            print(f"| {'page':<40} | first (ms) | p95 (ms) | server CPU (ms) | size (KiB) |")
            print(f"| {'-' * 40} | --- | --- | --- | --- |")
            results = {}
            for name, path, between in pages:
                times, cpu = timed(client, path, args.samples, app.process.pid, between)
                size = len(client.get(path).content) / 1024
                results[name] = p95(times) * 1000
                print(f"| {name:<40} | {times[0] * 1000:.0f} | {results[name]:.0f} | {cpu * 1000:.0f} | {size:.0f} |",
                      flush=True)
    print(f"live poll p95 (running run of {args.cells} cells): {results['live.json, running run, unchanged']:.0f} ms "
          f"unchanged, {results['live.json, running run, another tab']:.0f} ms another tab, "
          f"{results['live.json, running run, a cell more']:.0f} ms after a new cell")
    print(f"scenario history p95: {results[pages[-4][0]]:.0f} ms (last {RUNS_SHOWN} runs), "
          f"{results[pages[-3][0]]:.0f} ms (all {args.history_runs + 2})")
    print(f"run page p95: {results['run page']:.0f} ms for {args.cells} cells")


if __name__ == "__main__":
    main()
