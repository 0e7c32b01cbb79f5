"""The dashboard's server time on PostgreSQL: a pull-request run of 20,000 cells and its base, and a
scenario checked by 500 runs, served by the real app (uvicorn) over HTTP; prints the p95 of each
page, the run page's last as ``run page p95: N ms for 20000 cells`` (target: N ≤ 300).

Run: .venv/bin/python bench/web.py [--cells N] [--history-runs N] [--samples N] [--admin-url URL]
It creates a database of its own in the cluster behind --admin-url and drops it at the end.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from sqlalchemy import select, text  # noqa: E402

from bench.big_run import ADMIN_URL, fill, p95  # noqa: E402
from services.db.models import Result  # noqa: E402
from services.db.runs import create_run  # noqa: E402
from services.db.session import engine_for, session_scope  # noqa: E402
from services.reports.history import MAX_RUNS_SHOWN, RUNS_SHOWN  # noqa: E402
from tests.big_run_data import BigRun  # noqa: E402
from tests.databases import scratch_database  # noqa: E402
from tests.served_app import served_app  # noqa: E402

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


def timed(client: httpx.Client, path: str, samples: int) -> list[float]:
    times = []
    for _ in range(samples):
        start = time.perf_counter()
        client.get(path).raise_for_status()
        times.append(time.perf_counter() - start)
    return times


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
        head, base = big.head_id, big.base_id
        pages = [
            ("runs page", "/"),
            ("run page, filtered (status=fail)", f"/runs/{head}?status=fail"),
            ("run page, second heatmap page", f"/runs/{head}?page=2"),
            ("live.json (the page's poll)", f"/runs/{head}/live.json"),
            ("cell page", f"/runs/{head}/cells/{cell_id}"),
            ("compare (base → head)", f"/runs/{base}/compare/{head}"),
            (f"scenario history (last {RUNS_SHOWN} of {args.history_runs + 2} runs)", f"/scenarios/{scenario}"),
            (f"scenario history (all {args.history_runs + 2} runs)", f"/scenarios/{scenario}?runs={MAX_RUNS_SHOWN}"),
            ("badge", "/badge/big/run.svg"),
            ("run page", f"/runs/{head}"),
        ]
        with tempfile.TemporaryDirectory() as logs, served_app(url, Path(logs)) as app, \
                httpx.Client(base_url=app.url, timeout=120) as client:
            client.get(f"/runs/{base}").raise_for_status()  # imports, templates and the pool: no request's cost
            print(f"\nDashboard, PostgreSQL, one uvicorn process; {args.cells:,} cells in the run and its base")
            print(f"| {'page':<40} | first (ms) | p95 (ms) | size (KiB) |")
            print(f"| {'-' * 40} | --- | --- | --- |")
            results = {}
            for name, path in pages:
                times = timed(client, path, args.samples)
                size = len(client.get(path).content) / 1024
                results[name] = p95(times) * 1000
                print(f"| {name:<40} | {times[0] * 1000:.0f} | {results[name]:.0f} | {size:.0f} |", flush=True)
    print(f"scenario history p95: {results[pages[-4][0]]:.0f} ms (last {RUNS_SHOWN} runs), "
          f"{results[pages[-3][0]]:.0f} ms (all {args.history_runs + 2})")
    print(f"run page p95: {results['run page']:.0f} ms for {args.cells} cells")


if __name__ == "__main__":
    main()
