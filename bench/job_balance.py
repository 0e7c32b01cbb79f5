"""How busy a run keeps its workers: jobs cut by count against jobs cut by cost (issue 32, item 4).

A real service (``gradci api`` and N ``gradci worker`` processes of concurrency 1, each a host of its
own to the planner) checks the same scenarios twice. The first run has no earlier timing, so its jobs
are cut by count (``job_chunk_size``); the second is weighed with the first's (its jobs' walls shared
out among their cells: ``gradci.services.db.cell_costs``), cut at the run's target cost and sent
longest first. Printed per run, from the stored jobs' claim and finish times: the run's span (first
job claimed to last job finished), the sum of its jobs' walls, and the utilisation — that sum over
(workers × span); 1.0 is no worker ever idle while the run lasts. Goal: ≥ 0.85 on 2 and 4 workers.

``--skewed`` checks a repository instead (``bench.skewed_project``: a copy of torchdiffeq with a few
heavy scenarios listed before many light ones), its second run at a second commit (the README edited)
so that each run meets cold runners, as a repository's next commit does; the scenarios' costs still
carry over, by name. ``--hosts N`` puts each worker on a simulated host of its own
(``tests.support.netns``: a network namespace joined to a bridge by a veth pair, its own hostname,
workdir and caches), reaching a private PostgreSQL and Redis, the API and a git daemon over the
network; it needs root, and implies ``--skewed``. Each host gets an equal share of this machine's
CPUs (``--host-cpus``; 0.5 of a core each for 4 hosts on 2 cores: a CFS quota), so that a host runs as
fast as a host of that size whatever the others do — a job left alone at a run's end does not speed
up to a whole machine, as it would on hosts that share the machine's cores freely. Everything it
starts is stopped and the namespaces and cgroups removed on the way out, on an error or Ctrl-C (or
SIGTERM) too.

Run: .venv/bin/python -m bench.job_balance [--workers N] [--sample N] [--database-url URL --broker-url URL]
     .venv/bin/python -m bench.job_balance --skewed [--workers N] [--database-url URL --broker-url URL]
     .venv/bin/python -m bench.job_balance --hosts 4 [--host-cpus F]      (as root)
Without URLs the service runs embedded (SQLite, SQLite broker transport) in a temporary folder.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from bench.affected_project import commit
from bench.service import ROOT, TOKEN, chosen_scenarios, free_port, service_setup
from bench.skewed_project import make_repository
from gradci.scenarios.contract.matrix import exact_pattern

LABELS = ("cut by count (no earlier timing)", "cut by cost (the first run's timings)")
RUN_TIMEOUT_S = 900


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


def finished_run(client: httpx.Client, body: dict[str, Any]) -> int:
    """The id of the run ``body`` asks for (POST /api/runs), once it finished; it must have passed."""
    answer = client.post("/api/runs", json={**body, "devices": ["cpu"]})
    answer.raise_for_status()
    run_id = int(answer.json()["id"])
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while (run := client.get(f"/api/runs/{run_id}").json())["status"] not in ("passed", "failed", "error", "cancelled"):
        if time.monotonic() > deadline:
            raise RuntimeError(f"run {run_id} did not finish within {RUN_TIMEOUT_S} s")
        time.sleep(0.5)
    if run["status"] != "passed":
        raise RuntimeError(f"run {run_id} ended {run['status']}: {run.get('error_message')}")
    return run_id


def job_figures(database_url: str, run_id: int) -> tuple[int, float, float, float]:
    """(jobs, span from the first claim to the last finish, sum of the jobs' walls, the longest's), in seconds."""
    from sqlalchemy import select

    from gradci.services.db.models import Job
    from gradci.services.db.session import session_scope

    with session_scope(database_url, readonly=True) as session:
        times = [(started, finished) for started, finished in session.execute(
            select(Job.started_at, Job.finished_at).where(Job.run_id == run_id))
            if started is not None and finished is not None]
    span = (max(f for _, f in times) - min(s for s, _ in times)).total_seconds()
    walls = [(f - s).total_seconds() for s, f in times]
    return len(times), span, sum(walls), max(walls)


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


def two_runs(client: httpx.Client, database_url: str, bodies: tuple[dict[str, Any], dict[str, Any]],
             workers: int) -> None:
    """Run ``bodies`` one after the other (the first cut by count, the second by cost) and print the figures."""
    for label, body in zip(LABELS, bodies):
        load = os.getloadavg()[0]
        run_id = finished_run(client, body)
        jobs, span, busy, longest = job_figures(database_url, run_id)
        print(f"run {run_id}, {label}: {jobs} jobs (longest {longest:.1f} s), span {span:.1f} s, jobs' walls {busy:.1f} s, "
              f"utilisation {busy / (workers * span):.2f}  (goal ≥ 0.85); load average {load:.1f} → "
              f"{os.getloadavg()[0]:.1f}", flush=True)
    played = simulated(database_url, run_id, workers)
    print(f"the last run's measured costs played out on {workers} workers: utilisation cut by count "
          f"{played['count']:.2f}, cut by cost {played['cost']:.2f}")


def second_commit(root: Path) -> str:
    """The repository at ``root`` with its README edited: a new commit, the same scenarios."""
    with (root / "README.md").open("a") as readme:
        readme.write("\nThe second run's commit.\n")
    return commit(root, "README: a line")


def on_one_host(args: argparse.Namespace) -> None:
    """N ``gradci worker`` processes on this host (the built-in library's sample, or the skewed repository)."""
    workdir, database_url, env = service_setup(args.database_url, args.broker_url)
    if args.skewed:
        root = workdir / "skewed"
        bodies: Any = ({"repo": str(root), "sha": make_repository(root)},)
        what = f"the skewed repository ({root})"
    else:
        names = chosen_scenarios(args.sample)
        bodies = ({"scenarios": [exact_pattern(name) for name in names]},) * 2
        what = f"{len(names)} scenarios of the library, every available backend"
    print(f"{what}, cpu; {args.workers} workers of concurrency 1 on this host; "
          f"{'PostgreSQL' if args.database_url else 'SQLite'}; workdir {workdir}")
    port = free_port()
    processes = start(env, port, args.workers, workdir)
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", headers={"Authorization": f"Bearer {TOKEN}"},
                          timeout=30) as client:
            wait_for_workers(client, args.workers)
            if args.skewed:  # the second commit only now: the first run's checkout is of the first
                bodies = (bodies[0], {"repo": str(root), "sha": second_commit(root)})
            two_runs(client, database_url, bodies, args.workers)
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            process.wait(timeout=60)


def on_hosts(hosts: int, cpus: float | None) -> None:
    """A worker on each of ``hosts`` simulated hosts of ``cpus`` CPUs, checking the skewed repository (root)."""
    from tests.support.faults import available as servers_unavailable
    from tests.support.netns import available as hosts_unavailable
    from tests.support.netns import hosts_service

    unavailable = hosts_unavailable() or servers_unavailable()
    if unavailable is not None:
        raise SystemExit(f"simulated hosts cannot run here: {unavailable}")
    names = [chr(ord("a") + i) for i in range(hosts)]
    made: list[Path] = []

    def repository(root: Path) -> str:
        made.append(root)
        return make_repository(root)

    with hosts_service("skewed", names, make_repository=repository, cpus=cpus, logs_on_exit=False) as service:
        share = f"{cpus:g} CPUs each" if cpus else "the machine's CPUs shared freely"
        print(f"the skewed repository, cpu; {hosts} hosts (network namespaces over veth, {share}), one worker "
              f"of concurrency 1 each; private PostgreSQL and Redis at {service.network.gateway}", flush=True)
        first = {"repo": service.repo_url, "sha": service.sha}
        second = {"repo": service.repo_url, "sha": second_commit(made[0])}
        try:
            with service.api.client() as client:
                two_runs(client, service.database_url, (first, second), hosts)
        except BaseException:
            print(service.logs())
            raise


@contextlib.contextmanager
def interrupted_by_sigterm() -> Iterator[None]:
    """SIGTERM unwinds like Ctrl-C, so that every ``finally`` stops what it started."""
    def stop(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=2, help="worker processes (hosts), concurrency 1 each")
    parser.add_argument("--sample", type=int, default=3, help="every N-th scenario of the library (default 3)")
    parser.add_argument("--skewed", action="store_true", help="the skewed repository instead of the library")
    parser.add_argument("--hosts", type=int, default=0,
                        help="N simulated hosts, a worker on each (root; the skewed repository)")
    parser.add_argument("--host-cpus", type=float, default=None,
                        help="each host's CPUs (default: this machine's shared equally; 0: no limit)")
    parser.add_argument("--database-url", help="PostgreSQL URL (an empty database); default: embedded SQLite")
    parser.add_argument("--broker-url", help="Redis URL; default: the embedded SQLite transport")
    args = parser.parse_args()
    with interrupted_by_sigterm():
        if args.hosts:
            cpus = (os.cpu_count() or 1) / args.hosts if args.host_cpus is None else args.host_cpus
            on_hosts(args.hosts, cpus or None)
        else:
            on_one_host(args)


if __name__ == "__main__":
    main()
