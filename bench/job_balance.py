"""How busy a run keeps its workers: jobs cut by count against jobs cut by cost (issue 32, item 4).

A real service (``gradci api`` and N ``gradci worker`` processes of concurrency 1, each a host of its
own to the planner) checks the same scenarios twice. The first run has no earlier timing, so its jobs
are cut by count (``job_chunk_size``); the second is weighed with the first's (its jobs' walls shared
out among their cells: ``gradci.services.db.cell_costs``), cut at the run's target cost and sent
longest first. Printed per run, from the stored jobs' claim and finish times: the run's span (first
job claimed to last job finished), the sum of its jobs' walls, and the utilisation — that sum over
(workers × span); 1.0 is no worker ever idle while the run lasts. Goal: ≥ 0.85 on 2 and 4 workers.

Run: .venv/bin/python bench/job_balance.py [--workers N] [--sample N] [--database-url URL --broker-url URL]
Without URLs the service runs embedded (SQLite, SQLite broker transport) in a temporary folder.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

import httpx

from bench.service import ROOT, TOKEN, chosen_scenarios, free_port, service_setup
from gradci.scenarios.contract.matrix import exact_pattern


def start(env: dict[str, str], port: int, workers: int, logs: Path) -> list[subprocess.Popen[bytes]]:
    gradci = [sys.executable, "-m", "gradci"]
    commands = [("api", [*gradci, "api", "--port", str(port)])] + [
        (f"worker-{i}", [*gradci, "worker", "--device", "cpu", "--concurrency", "1", "--loglevel", "WARNING"])
        for i in range(workers)]
    processes = []
    for name, argv in commands:
        with open(logs / f"{name}.log", "wb") as log:
            processes.append(subprocess.Popen(argv, env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT))
    return processes


def wait_for_workers(client: httpx.Client, workers: int, timeout_s: float = 240) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if client.get("/api/health").json().get("workers_online", {}).get("cpu", 0) >= workers:
                return
        except (httpx.HTTPError, ValueError):
            pass
        time.sleep(0.5)
    raise RuntimeError(f"{workers} workers did not come online")


def finished_run(client: httpx.Client, patterns: list[str]) -> int:
    run_id = client.post("/api/runs", json={"scenarios": patterns, "devices": ["cpu"]}).json()["id"]
    while client.get(f"/api/runs/{run_id}").json()["status"] not in ("passed", "failed", "error", "cancelled"):
        time.sleep(0.5)
    return int(run_id)


def job_figures(database_url: str, run_id: int) -> tuple[int, float, float]:
    """(jobs, span from the first claim to the last finish, sum of the jobs' walls), in seconds."""
    from sqlalchemy import select

    from gradci.services.db.models import Job
    from gradci.services.db.session import session_scope

    with session_scope(database_url, readonly=True) as session:
        times = [(started, finished) for started, finished in session.execute(
            select(Job.started_at, Job.finished_at).where(Job.run_id == run_id))
            if started is not None and finished is not None]
    span = (max(f for _, f in times) - min(s for s, _ in times)).total_seconds()
    return len(times), span, sum((f - s).total_seconds() for s, f in times)


def simulated(database_url: str, run_id: int, workers: int) -> dict[str, float]:
    """Both cuts of run ``run_id``'s jobs, weighed with its own measured costs, played out on ``workers``.

    The second run meets warmer caches than the first, so their spans alone do not compare the cuts:
    this does, on the same costs (each worker takes the next job when it frees up).
    """
    import heapq

    from sqlalchemy import select

    from gradci.services.db.cell_costs import scenario_costs
    from gradci.services.db.models import Job, ScenarioCatalogEntry
    from gradci.services.db.session import session_scope
    from gradci.services.job_balance import Costs, cut_by_cost, longest_first, target_seconds
    from gradci.services.planner import chunked

    with session_scope(database_url, readonly=True) as session:
        seconds = scenario_costs(session, run_id)
        groups: dict[tuple[str, str], list[str]] = {}
        for backend, device, names in session.execute(select(Job.backend, Job.device, Job.scenarios)
                                                      .where(Job.run_id == run_id).order_by(Job.id)):
            groups.setdefault((backend, device), []).extend(names)
        listed = {name: i for i, name in enumerate(session.scalars(
            select(ScenarioCatalogEntry.name).where(ScenarioCatalogEntry.run_id == run_id)
            .order_by(ScenarioCatalogEntry.id)))}
    groups = {key: sorted(names, key=lambda name: listed.get(name, 0)) for key, names in groups.items()}
    costs = Costs(seconds, workers=workers)
    weights = {key: costs.of(names, *key) for key, names in groups.items()}
    cost_of = {(key, name): s for key, names in groups.items() for name, s in zip(names, weights[key])}
    by_count = [sum(cost_of[key, n] for n in chunk) for key, names in groups.items() for chunk in chunked(names, 25)]
    target = target_seconds(sum(map(sum, weights.values())), workers)
    pieces = [cost for key, names in groups.items() for _, cost in cut_by_cost(names, weights[key], target, 25)]
    by_cost = [pieces[i] for i in longest_first(pieces)]

    def use(jobs: list[float]) -> float:
        free = [0.0] * workers
        for job in jobs:
            heapq.heappush(free, heapq.heappop(free) + job)
        return sum(jobs) / workers / max(free)

    return {"count": use(by_count), "cost": use(by_cost)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=2, help="worker processes (hosts), concurrency 1 each")
    parser.add_argument("--sample", type=int, default=3, help="every N-th scenario of the library (default 3)")
    parser.add_argument("--database-url", help="PostgreSQL URL (an empty database); default: embedded SQLite")
    parser.add_argument("--broker-url", help="Redis URL; default: the embedded SQLite transport")
    args = parser.parse_args()

    workdir, database_url, env = service_setup(args.database_url, args.broker_url)
    names = chosen_scenarios(args.sample)
    patterns = [exact_pattern(name) for name in names]
    print(f"{len(names)} scenarios of the library, every available backend, cpu; {args.workers} workers of "
          f"concurrency 1; {'PostgreSQL' if args.database_url else 'SQLite'}; workdir {workdir}")
    port = free_port()
    processes = start(env, port, args.workers, workdir)
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", headers={"Authorization": f"Bearer {TOKEN}"},
                          timeout=30) as client:
            wait_for_workers(client, args.workers)
            for label in ("cut by count (no earlier timing)", "cut by cost (the first run's timings)"):
                run_id = finished_run(client, patterns)
                jobs, span, busy = job_figures(database_url, run_id)
                print(f"run {run_id}, {label}: {jobs} jobs, span {span:.1f} s, jobs' walls {busy:.1f} s, "
                      f"utilisation {busy / (args.workers * span):.2f}  (goal ≥ 0.85)")
            played = simulated(database_url, run_id, args.workers)
            print(f"the last run's measured costs played out on {args.workers} workers: utilisation cut by count "
                  f"{played['count']:.2f}, cut by cost {played['cost']:.2f}")
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            process.wait(timeout=60)


if __name__ == "__main__":
    main()
