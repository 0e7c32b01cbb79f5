"""Big runs: a pull-request run of a million results and its base run in PostgreSQL, served by the real
app (uvicorn, API and dashboard); prints the p95 of each read and the server's peak resident memory
during it (Linux VmHWM, reset before each request).

Targets: GET /api/runs/{id} and result pages (first and a deep cursor) p95 < 100 ms; the report (JSON
and markdown), junit.xml and the dashboard's run page < 1 s and < 200 MB.

Run: .venv/bin/python bench/big_run.py [--cells N] [--samples N] [--admin-url URL]
It creates a database of its own in the cluster behind --admin-url (default: the local ``test``
database, as the tests use) and drops it at the end.
"""
from __future__ import annotations

import argparse
import math
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import httpx
from sqlalchemy import func, select

from gradci._testing.big_runs import MATRIX_SIZE, BigRun, create_big_run
from gradci._testing.databases import scratch_database
from gradci._testing.served_app import ServedApp, served_app
from gradci.services.db.models import Result, Run
from gradci.services.db.pagination import encode_cursor
from gradci.services.db.session import engine_for, session_scope
from gradci.services.reports.run_report import store_report

ROOT = Path(__file__).resolve().parent.parent

ADMIN_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"


def fill(url: str, cells: int) -> BigRun:
    start = time.perf_counter()
    with session_scope(url) as session:
        big = create_big_run(session, cells)
    with engine_for(url).connect().execution_options(isolation_level="AUTOCOMMIT") as connection:
        connection.exec_driver_sql("VACUUM ANALYZE results, scenario_catalog")
    print(f"stored 2 × {cells:,} results in {time.perf_counter() - start:.0f} s", flush=True)
    start = time.perf_counter()
    with session_scope(url) as session:  # what the worker's finalize_run does for each run
        for run_id in (big.base_id, big.head_id):
            store_report(session, session.get(Run, run_id))
    print(f"finalisation: both runs' reports stored in {time.perf_counter() - start:.1f} s", flush=True)
    return big


def p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.95 * len(ordered)) - 1)]


def measure(app: ServedApp, name: str, samples: int, request: Callable[[], object]) -> dict[str, object]:
    """``samples`` timed calls; the first is reported apart (a cold cache, a first plan)."""
    times, peaks = [], []
    for _ in range(samples):
        start = time.perf_counter()
        _, peak = app.peak_rss_during(request)
        times.append(time.perf_counter() - start)
        peaks.append(peak)
    row = {"what": name, "first_s": times[0], "p50_s": statistics.median(times), "p95_s": p95(times),
           "peak_rss_mib": max(peaks)}
    print(f"  {name}: first {times[0]:.3f} s, p95 {row['p95_s']:.3f} s, peak RSS {row['peak_rss_mib']:.0f} MiB",
          flush=True)
    return row


def download(client: httpx.Client, path: str) -> tuple[float, int]:
    """(seconds to the first byte, bytes) of a streamed download."""
    start, first, size = time.perf_counter(), None, 0
    with client.stream("GET", path) as response:
        response.raise_for_status()
        for chunk in response.iter_bytes():
            first = first if first is not None else time.perf_counter() - start
            size += len(chunk)
    return first or 0.0, size


def run_benchmark(url: str, big: BigRun, samples: int) -> list[dict[str, object]]:
    with engine_for(url).connect() as connection:
        last_id = connection.execute(select(func.max(Result.id)).where(Result.run_id == big.head_id)).scalar_one()
    deep = encode_cursor(last_id - 500)  # the page 500 cells before the end of a million
    head = big.head_id
    rows = []
    with tempfile.TemporaryDirectory() as logs, served_app(url, Path(logs)) as app, \
            httpx.Client(base_url=app.url, timeout=600) as client:
        client.get(f"/api/runs/{big.base_id}").raise_for_status()  # imports and the pool: not a request's cost
        baseline = app.rss_mib()
        print(f"server resident after warm-up: {baseline:.0f} MiB", flush=True)

        def get(path: str) -> Callable[[], object]:
            return lambda: client.get(path).raise_for_status()

        for name, path, count in [
            ("GET /api/runs/{id}", f"/api/runs/{head}", samples),
            ("results, first page (100)", f"/api/runs/{head}/results?limit=100", samples),
            ("results, deep cursor (100)", f"/api/runs/{head}/results?limit=100&cursor={deep}", samples),
            ("report (JSON)", f"/api/runs/{head}/report", samples),
            ("report (markdown: the PR comment)", f"/api/runs/{head}/report?format=markdown", samples),
            ("dashboard run page", f"/runs/{head}", samples),
        ]:
            rows.append(measure(app, name, count, get(path)))
        first_bytes: list[float] = []
        sizes: list[int] = []

        def junit() -> None:
            first, size = download(client, f"/api/runs/{head}/junit.xml")
            first_bytes.append(first)
            sizes.append(size)

        row = measure(app, "junit.xml (full download)", 3, junit)
        row["note"] = f"first byte p95 {p95(first_bytes):.2f} s, {sizes[-1] / 2**20:.0f} MiB of XML"
        rows.append(row)
        for row in rows:
            row["growth_mib"] = row["peak_rss_mib"] - baseline
    return rows


def print_figures(rows: list[dict[str, object]], cells: int) -> None:
    print(f"\nBig run: {cells:,} results (+ a base run of as many), PostgreSQL, one uvicorn process")
    print(f"| {'request':<36} | first (s) | p50 (s) | p95 (s) | peak RSS (MiB) | growth (MiB) |")
    print(f"| {'-' * 36} | --- | --- | --- | --- | --- |")
    for row in rows:
        note = f" ({row['note']})" if "note" in row else ""
        print(f"| {row['what']:<36} | {row['first_s']:.3f} | {row['p50_s']:.3f} | {row['p95_s']:.3f} | "
              f"{row['peak_rss_mib']:.0f} | {row['growth_mib']:.0f} |{note}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", type=int, default=1_000_020, help="results per run (a multiple of 28)")
    parser.add_argument("--samples", type=int, default=20, help="requests per measure (junit.xml: 3)")
    parser.add_argument("--admin-url", default=ADMIN_URL)
    args = parser.parse_args()
    cells = args.cells // MATRIX_SIZE * MATRIX_SIZE
    with scratch_database(args.admin_url, "gradci_bench") as url:
        big = fill(url, cells)
        rows = run_benchmark(url, big, args.samples)
    print_figures(rows, cells)


if __name__ == "__main__":
    main()
