"""Service benchmarks, printed as figures (not a timed test; the machine is shared).

1. The built-in suite on the CPU through the service — submit over HTTP → every result stored —
   ÷ ``gradci.scenarios.check`` in a fresh process on the same cells (target ≤ 1.25 with PostgreSQL
   and Redis, ≤ 1.15 embedded: issue 21). Both sides pay for their imports once: the check process
   imports jax and torch, the worker's runner too; both start with JAX's compilation cache empty.
2. Ingestion of synthetic results through the batched upsert, committed every
   ``BATCH_CELLS`` as a worker does (target ≥ 2,000 cells/s), first write and a redelivery's rewrite.
3. ``--first-answer``: the first answer a pull request gets (issue 32 item 3, target ≤ 1 s): a real
   ``gradci api`` and ``gradci worker`` (PostgreSQL and Redis of the test cluster) and a fake GitHub
   on loopback; each push of a pull request is a signed webhook, timed from its POST to the pending
   commit status (token mode) or the in-progress check run (App mode) arriving at the fake, and to
   the run's jobs being stored (its planning done), for contrast. ``--busy``: each push arrives while
   every pool process of the worker runs a sleeping job and another waits behind each (a run
   submitted through the API just before); ``--before-tree DIR`` times a service imported from
   another source tree first, side by side.

Run: .venv/bin/python bench/service.py [--sample N | --all] [--database-url URL --broker-url URL]
Without URLs the service runs embedded (SQLite, SQLite broker transport) in a temporary folder.
.venv/bin/python -m bench.service --first-answer [--pushes N] [--busy [--concurrency N]] [--before-tree DIR]
(as a module from the repository root: it uses the tests' fake GitHub)
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

# The storage layer is imported where it is used, so that the timed check process loads only the engine;
# these two contract modules are standard library only.
from gradci.scenarios.contract.cell import STATUSES as CELL_STATUSES
from gradci.scenarios.contract.matrix import exact_pattern

ROOT = Path(__file__).resolve().parent.parent

TOKEN = "bench-token"
INGEST_CELLS = 20_000
BATCH_CELLS = 500  # worker.execute.BATCH_CELLS: a worker commits at most this many cells at once
STATUSES = ("pass", "pass", "pass", "fail", "error", "skip", "xfail", "xpass")


# --- 1. the suite through the service ------------------------------------------------------------


def chosen_scenarios(sample: int) -> list[str]:
    """Every ``sample``-th scenario of the default library: each family represented."""
    from gradci.scenarios import library

    return [scenario.name for scenario in library.default()][::sample]


def check_in_process(names_file: Path) -> None:
    """Child mode: check the named scenarios, print cells and seconds as JSON."""
    start = time.perf_counter()
    import gradci
    from gradci.scenarios import library

    wanted = set(json.loads(names_file.read_text()))
    report = gradci.check([s for s in library.default() if s.name in wanted], devices=["cpu"])
    cells = {f"{c.scenario}|{c.backend}|{c.device}|{c.dtype}": c.status for c in report.cells}
    print(json.dumps({"seconds": time.perf_counter() - start, "cells": cells}))


def time_in_process(names: list[str], workdir: Path) -> tuple[float, dict[str, str]]:
    names_file = workdir / "names.json"
    names_file.write_text(json.dumps(names))
    # JAX's compilation cache empty, as the service's worker finds its own in the fresh workdir: the
    # user's cache (~/.cache/gradci/jax), warm from earlier checks, made this side up to a third
    # faster (25-35 s against 34-39 s for --sample 12 on 2 cores, 2026-12-01).
    env = {**os.environ, "GRADCI_JAX_CACHE_DIR": str(workdir / "check-jax-cache")}
    start = time.perf_counter()
    done = subprocess.run([sys.executable, __file__, "--check-in-process", str(names_file)],
                          capture_output=True, text=True, check=True, env=env)
    wall = time.perf_counter() - start
    return wall, json.loads(done.stdout.strip().splitlines()[-1])["cells"]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start_service(env: dict[str, str], port: int, logs: Path) -> list[subprocess.Popen[bytes]]:
    gradci = [sys.executable, "-m", "gradci"]
    commands = {"api": [*gradci, "api", "--port", str(port)],
                "worker": [*gradci, "worker", "--device", "cpu", "--concurrency", "1", "--loglevel", "WARNING"]}
    processes = []
    for name, argv in commands.items():
        with open(logs / f"{name}.log", "wb") as log:
            processes.append(subprocess.Popen(argv, env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT))
    return processes


def wait_ready(client: httpx.Client, timeout_s: float = 180) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            health = client.get("/api/health").json()
            if health.get("workers_online", {}).get("cpu"):
                return
        except (httpx.HTTPError, ValueError):
            pass
        time.sleep(0.3)
    raise RuntimeError("the service did not come up")


def stored_cells(database_url: str, run_id: int) -> int:
    from sqlalchemy import func, select

    from gradci.services.db.models import Result
    from gradci.services.db.session import session_scope

    with session_scope(database_url, readonly=True) as session:
        return int(session.scalar(select(func.count()).where(Result.run_id == run_id)) or 0)


def time_service(names: list[str], expected: int, env: dict[str, str], database_url: str,
                 logs: Path) -> tuple[float, float, dict[str, Any]]:
    """(seconds until every cell is stored, seconds until the run is finished, the run)."""
    port = free_port()
    processes = start_service(env, port, logs)
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", headers={"Authorization": f"Bearer {TOKEN}"},
                          timeout=30) as client:
            wait_ready(client)
            start = time.perf_counter()
            # Exact names: a plain word is a substring, and would also select these scenarios' variants.
            patterns = [exact_pattern(name) for name in names]
            run_id = client.post("/api/runs", json={"scenarios": patterns, "devices": ["cpu"]}).json()["id"]
            while stored_cells(database_url, run_id) < expected:
                if client.get(f"/api/runs/{run_id}").json()["status"] in ("error", "cancelled"):
                    raise RuntimeError(f"run {run_id} ended early: {client.get(f'/api/runs/{run_id}').json()}")
                time.sleep(0.1)
            stored = time.perf_counter() - start
            while (run := client.get(f"/api/runs/{run_id}").json())["status"] not in ("passed", "failed", "error"):
                time.sleep(0.1)
            return stored, time.perf_counter() - start, run
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            process.wait(timeout=30)


# --- 2. ingestion --------------------------------------------------------------------------------


def synthetic_cell(index: int) -> dict[str, Any]:
    return {"scenario": f"scenario_{index:06d}", "operator": "gradient", "framework": "jax", "backend": "jax-rev",
            "mode": "reverse", "device": "cpu", "dtype": "float64", "status": STATUSES[index % len(STATUSES)],
            "max_abs_err": 1e-12 * index, "max_rel_err": 1e-13 * index, "atol": 1e-9, "rtol": 1e-6,
            "time_ms": 0.4, "first_call_ms": 12.0, "peak_memory_bytes": None,
            "message": "" if index % 8 < 3 else "max abs error above tolerance", "fingerprint": f"{index:020x}"}


def ingestion_rate(database_url: str) -> tuple[float, float]:
    """cells/s of the first write and of a redelivery's rewrite of the same cells."""
    from gradci.services.db.results import upsert_results
    from gradci.services.db.runs import create_run
    from gradci.services.db.session import session_scope

    with session_scope(database_url) as session:
        run_id = create_run(session).id
    cells = [synthetic_cell(i) for i in range(INGEST_CELLS)]
    rates = []
    for _ in range(2):
        start = time.perf_counter()
        for offset in range(0, len(cells), BATCH_CELLS):
            with session_scope(database_url) as session:
                upsert_results(session, run_id, cells[offset:offset + BATCH_CELLS], job_id=None)
        rates.append(len(cells) / (time.perf_counter() - start))
    assert stored_cells(database_url, run_id) == INGEST_CELLS
    return rates[0], rates[1]


# --- 3. the first answer -------------------------------------------------------------------------

FIRST_ANSWER_MODULE = '''
import numpy as np
from gradci import Scenario, namespace

def poly(x):
    return namespace(x).sum(x ** 3 - 2 * x)

def scenarios():
    x = np.array([0.3, -0.2, 0.7])
    return [Scenario(f"s{i}/poly", "gradient", poly, x * (1 + {push} + i / 10)) for i in range(4)]
'''


BUSY_MODULE = '''
import time

import numpy as np
from gradci import Scenario, namespace

def slow(x):
    time.sleep(SLEEP_S)  # a cell calls it twice
    return namespace(x).sum(x ** 2)

def scenarios():
    x = np.array([0.3, -0.2, 0.7]) * (1 + {push})
    return [Scenario(f"slow/{i}", "gradient", slow, x, reference=2 * x) for i in range(JOBS)]
'''
BUSY_SLEEP_S = 4  # each sleeping job: about 8 s


@dataclasses.dataclass(frozen=True)
class FirstAnswerRepo:
    """The mirrored repository the first-answer bench pushes: a base, each push's head, and with
    ``--busy`` each push's sleeping commit (a run of it keeps every pool process busy)."""
    mirrors: Path
    shas: list[str]
    sleeping: list[str]


def first_answer_repo(workdir: Path, pushes: int, concurrency: int) -> FirstAnswerRepo:
    from gradci._testing.repos import commit_all, init_repository

    root = workdir / "mirrors"
    repo = init_repository(root / "Codertocat" / "Hello-World.git", "master")
    (repo / "gradci.toml").write_text('[scenarios]\nmodules = ["grad_scenarios"]\n'
                                      '[matrix]\nbackends = ["torch-rev"]\ndtypes = ["float64"]\n')
    shas, sleeping = [], []
    for push in range(pushes + 1):
        (repo / "grad_scenarios.py").write_text(FIRST_ANSWER_MODULE.replace("{push}", str(push)))
        shas.append(commit_all(repo, f"push {push}"))
    for push in range(pushes):  # two jobs per pool process: one runs, one waits behind it
        module = BUSY_MODULE.replace("{push}", str(push)).replace("SLEEP_S", str(BUSY_SLEEP_S))
        (repo / "grad_scenarios.py").write_text(module.replace("JOBS", str(2 * concurrency)))
        sleeping.append(commit_all(repo, f"sleeping {push}"))
    return FirstAnswerRepo(root, shas, sleeping)


@contextlib.contextmanager
def imported_from(tree: Path | None) -> Iterator[None]:
    """The service processes started within import gradci from ``tree`` (None: this one)."""
    before = os.environ.get("PYTHONPATH")
    if tree is not None:
        os.environ["PYTHONPATH"] = str(tree)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = before


def first_answer(pushes: int, busy: bool = False, concurrency: int = 1, before_tree: Path | None = None) -> None:
    """Time webhook → first answer on GitHub over ``pushes`` pushes, in token mode then App mode.

    ``busy``: each push comes while every pool process of the worker runs a sleeping job, another
    queued behind each. ``before_tree``: the same, first with the service imported from that source tree.
    """
    from gradci._testing.databases import POSTGRES_ADMIN_URL, claimed_redis_database, scratch_database
    from tests.support.fake_github import FakeGitHub

    workdir = Path(tempfile.mkdtemp(prefix="gradci-bench-first-"))
    repo = first_answer_repo(workdir, pushes, concurrency)
    trees = [("before", before_tree), ("after", None)] if before_tree else [("", None)]
    for mode in ("token", "app"):
        for label, tree in trees:
            with FakeGitHub() as fake, scratch_database(POSTGRES_ADMIN_URL, "gradci_bench_first") as database, \
                    claimed_redis_database() as broker, imported_from(tree):
                figures = _first_answers(fake, mode, database, broker, workdir / f"{mode}-{label}", repo,
                                         busy=busy, concurrency=concurrency)
            answers, planned = zip(*figures)
            print(f"{mode} mode{', ' + label if label else ''}{', every worker busy' if busy else ''}, "
                  f"{len(figures)} pushes: webhook → pending {'status' if mode == 'token' else 'check run'} "
                  f"{_spread(answers)}; webhook → jobs stored (planned) {_spread(planned)}")
            print("  each push (the first also schedules its base's run): "
                  + ", ".join(f"{answer:.2f}/{plan:.2f} s" for answer, plan in figures), flush=True)


def _spread(seconds: Any) -> str:
    ordered = sorted(seconds)
    return f"median {ordered[len(ordered) // 2]:.2f} s (min {ordered[0]:.2f}, max {ordered[-1]:.2f})"


def _first_answer_settings(fake: Any, mode: str, workdir: Path, mirrors: Path, busy: bool) -> dict[str, str]:
    from tests.support.webhook_client import SECRET

    settings: dict[str, str] = dict(github_webhook_secret=SECRET, github_api_url=fake.url,
                                    worker_heartbeat_s="1", allowed_repos="Codertocat/Hello-World",
                                    clone_url_template=f"file://{mirrors}/{{full_name}}.git")
    if busy:  # a job per sleeping scenario
        settings["job_chunk_size"] = "1"
    if mode == "app":
        key = workdir / "app.pem"
        workdir.mkdir(parents=True)
        key.write_text(fake.as_app(31337, {4242: {"Codertocat/Hello-World"}}))
        key.chmod(0o600)
        settings |= dict(github_app_id="31337", github_app_private_key_file=str(key))
    else:
        settings["github_token"] = "bench-token"
    return settings


def _first_answers(fake: Any, mode: str, database: str, broker: str, workdir: Path, repo: FirstAnswerRepo, *,
                   busy: bool, concurrency: int) -> list[tuple[float, float]]:
    """(webhook → first answer, webhook → planned) of each push after the first (the base)."""
    from sqlalchemy import func, select

    from gradci._testing.processes import wait_for
    from gradci._testing.service import jobs_of, running_service
    from gradci.services.db.models import Job, Run
    from gradci.services.db.session import session_scope
    from tests.support.payloads import pull_request
    from tests.support.webhook_client import deliver_over_http

    def answered(sha: str) -> bool:
        if mode == "app":
            return bool(fake.check_runs_for(sha))
        return any(status["state"] == "pending" for status in fake.statuses_for(sha))

    def planned(sha: str) -> bool:
        with session_scope(database, readonly=True) as session:
            return bool(session.scalar(select(func.count()).select_from(Job).join(Run, Run.id == Job.run_id)
                                       .where(Run.head_sha == sha)))

    def finished(sha: str) -> bool:
        with session_scope(database, readonly=True) as session:
            statuses = list(session.scalars(select(Run.status).where(Run.head_sha == sha)))
        return bool(statuses) and all(status in ("passed", "failed", "error", "cancelled") for status in statuses)

    def keep_busy(service: Any, sha: str) -> int:
        """A run of sleeping jobs, submitted through the API (it reports nothing to GitHub), once every
        pool process runs one of its jobs and another waits behind each."""
        run_id = service.submit(repo="Codertocat/Hello-World", sha=sha)

        def every_process_busy() -> bool:
            statuses = [job.status for job in jobs_of(database, run_id)]
            return statuses.count("running") == concurrency and statuses.count("queued") >= concurrency

        wait_for(every_process_busy, "every pool process busy", timeout_s=180, interval_s=0.05)
        return run_id

    figures = []
    settings = _first_answer_settings(fake, mode, workdir, repo.mirrors, busy)
    with running_service(database, broker, workdir / "work", workdir / "logs", concurrency=concurrency,
                         **settings) as service:
        base = repo.shas[0]
        for number, head in enumerate(repo.shas[1:], 1):
            sleeping = keep_busy(service, repo.sleeping[number - 1]) if busy else None
            body = pull_request("opened" if number == 1 else "synchronize", head, base)
            if mode == "app":
                body["installation"] = {"id": 4242}
            start = time.perf_counter()
            sent = deliver_over_http(service.url, "pull_request", body)
            assert sent.status_code == 202, sent.text
            answer = planning = None
            while answer is None or planning is None:
                now = time.perf_counter() - start
                if answer is None and answered(head):
                    answer = now
                if planning is None and planned(head):
                    planning = now
                if now > 180:
                    raise RuntimeError(f"push {number}: no answer after 180 s; see {workdir / 'logs'}")
                time.sleep(0.01)
            figures.append((answer, planning))
            # The worker idle again before the next push (the base run too, after the first).
            wait_for(lambda: finished(head) and finished(base), f"push {number}'s runs", timeout_s=180)
            if sleeping is not None:
                service.wait_finished(sleeping, timeout_s=180)
    return figures


# --- main ----------------------------------------------------------------------------------------


def service_setup(database_url: str | None, broker_url: str | None) -> tuple[Path, str, dict[str, str]]:
    """A fresh work folder, the migrated database (embedded SQLite without a URL) and the service's environment."""
    workdir = Path(tempfile.mkdtemp(prefix="gradci-bench-"))
    database_url = database_url or f"sqlite:///{workdir / 'gradci.db'}"
    env = {key: value for key, value in os.environ.items() if not key.startswith("GRADCI_")}
    env.update(GRADCI_WORKDIR=str(workdir), GRADCI_API_TOKEN=TOKEN, GRADCI_DATABASE_URL=database_url,
               GRADCI_WORKER_HEARTBEAT_S="1", PYTHONPATH=str(ROOT))
    if broker_url:
        env["GRADCI_BROKER_URL"] = broker_url
    from gradci.services.db.migrate import upgrade

    upgrade(database_url)
    return workdir, database_url, env


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sample", type=int, default=6, help="every N-th scenario of the library (default 6)")
    parser.add_argument("--all", action="store_true", help="the whole default() library (long on a small machine)")
    parser.add_argument("--database-url", help="PostgreSQL URL (an empty database); default: embedded SQLite")
    parser.add_argument("--broker-url", help="Redis URL; default: the embedded SQLite transport")
    parser.add_argument("--first-answer", action="store_true",
                        help="time webhook → pending status / check run (PostgreSQL and Redis of the test cluster)")
    parser.add_argument("--pushes", type=int, default=5, help="pushes timed by --first-answer (default 5)")
    parser.add_argument("--busy", action="store_true",
                        help="--first-answer: each push while every pool process of the worker runs a job")
    parser.add_argument("--concurrency", type=int, default=1, help="--first-answer: the worker's pool processes")
    parser.add_argument("--before-tree", type=Path,
                        help="--first-answer: also time a service imported from this source tree (the "
                             "commit before a change, `git archive REV | tar -x -C DIR`), before this one")
    parser.add_argument("--check-in-process", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.check_in_process:
        check_in_process(args.check_in_process)
        return
    if args.first_answer:
        first_answer(args.pushes, busy=args.busy, concurrency=args.concurrency, before_tree=args.before_tree)
        return

    workdir, database_url, env = service_setup(args.database_url, args.broker_url)

    names = chosen_scenarios(1 if args.all else args.sample)
    print(f"{len(names)} scenarios, every available backend, cpu, each scenario's dtypes; "
          f"{'PostgreSQL' if args.database_url else 'SQLite'} + {'Redis' if args.broker_url else 'SQLite transport'}; "
          f"worker concurrency 1; workdir {workdir}")
    check_s, check_cells = time_in_process(names, workdir)
    stored_s, finished_s, run = time_service(names, len(check_cells), env, database_url, workdir)
    print(f"gradci check in a fresh process: {len(check_cells)} cells in {check_s:.1f} s")
    print(f"through the service: every result stored after {stored_s:.1f} s, run {run['status']} after "
          f"{finished_s:.1f} s")
    target = "1.25" if args.database_url or args.broker_url else "1.15 embedded, issue 21"
    print(f"service ÷ check: {stored_s / check_s:.2f}  (target ≤ {target})")
    print(f"status counts: check {_counts(check_cells.values())}, service {run['counts']}")
    service_cells = sum(run["counts"].get(status, 0) for status in CELL_STATUSES)
    if service_cells != len(check_cells):  # a ratio of different work would mean nothing
        raise SystemExit(f"the service checked {service_cells} cells and gradci check {len(check_cells)}")

    first, rewrite = ingestion_rate(database_url)
    print(f"ingestion, {INGEST_CELLS} synthetic cells in commits of {BATCH_CELLS}: "
          f"{first:,.0f} cells/s first write, {rewrite:,.0f} cells/s rewrite  (target ≥ 2,000)")


def _counts(statuses: Any) -> dict[str, int]:
    counts: dict[str, int] = {}
    for status in statuses:
        counts[status] = counts.get(status, 0) + 1
    return counts


if __name__ == "__main__":
    main()
