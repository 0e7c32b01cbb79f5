"""The service end to end: real PostgreSQL, Redis, ``gradci api`` over HTTP and a ``gradci worker``
process (conftest's ``redis_service``), on ``tests/data/projects/service_checks`` as a git repository;
then the same path embedded (``gradci up``, SQLite and the SQLite broker transport). No mock of any
of them, no eager Celery.

Each test session uses a PostgreSQL database of its own (conftest's ``postgres_database``) and a
Redis database number it claims (``redis_database``), so it collides neither with other test files
nor other sessions.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import select

from gradci._testing.processes import (
    RUN_TIMEOUT_S,
    alive,
    command_line,
    descendants,
    free_port,
    service_env,
    spawn,
    stop,
    wait_for,
)
from gradci._testing.service import Service, api_answers, assert_each_cell_once, jobs_of, results_of, start_api
from gradci.services.db.models import Job, Run, ScenarioCatalogEntry, StoredReport, Worker, utcnow
from gradci.services.db.session import dispose_engine, session_scope

pytestmark = pytest.mark.integration


# --- Postgres + Redis ---------------------------------------------------------------------------


def stored_report_of(database_url: str, run_id: int) -> dict | None:
    """The run's stored report, or None while it is not stored yet."""
    with session_scope(database_url, readonly=True) as session:
        stored = session.get(StoredReport, run_id)
        return stored.report if stored is not None else None


def test_a_run_lands_every_cell_exactly_once(redis_service: Service) -> None:
    run_id = redis_service.submit(scenarios=["ok/*", "crash/*"])
    run = redis_service.wait_finished(run_id)
    results = results_of(redis_service.database_url, run_id)
    assert_each_cell_once(results)
    # 4 scenarios × 2 backends (file [matrix]) × 2 dtypes
    assert len(results) == 16
    by_status: dict[str, set[tuple[str, str, str]]] = {}
    for r in results:
        by_status.setdefault(r.status, set()).add((r.scenario, r.backend, r.dtype))
    # The segfault is contained to its own cells; the job went on with the next scenarios.
    assert by_status["error"] == {("crash/segfault", b, d) for b in ("fd", "torch-rev") for d in ("float64", "float32")}
    assert all("SIGSEGV" in r.message for r in results if r.status == "error")
    # ok/tanh declares float64 only; the fd backend computes in float64 only.
    assert by_status["skip"] == {("ok/tanh", "torch-rev", "float32"), ("ok/tanh", "fd", "float32"),
                                 ("ok/poly", "fd", "float32"), ("ok/trig", "fd", "float32")}
    assert len(by_status["pass"]) == 8
    assert run["status"] == "failed"
    assert run["counts"]["pass"] == 8 and run["counts"]["error"] == 4 and run["counts"]["skip"] == 4
    assert run["coverage"] == pytest.approx(100 * 8 / 12)
    assert run["head_sha"] == redis_service.sha and run["finished_at"]
    assert all(r.fingerprint for r in results)
    jobs = jobs_of(redis_service.database_url, run_id)
    assert len(jobs) == 4 and {j.status for j in jobs} == {"done"} and {j.attempts for j in jobs} == {1}
    # finalize_run commits the final status, then stores the report in a transaction of its own
    stored_report = wait_for(lambda: stored_report_of(redis_service.database_url, run_id), "the stored report")
    with session_scope(redis_service.database_url, readonly=True) as session:
        catalog = session.scalars(select(ScenarioCatalogEntry).where(ScenarioCatalogEntry.run_id == run_id)).all()
        workers = session.scalars(select(Worker)).all()
    assert len(catalog) == 11 and all(entry.fingerprint for entry in catalog)
    assert stored_report["totals"]["head"]["pass"] == 8  # kept when the run was finalised
    assert any(w.device == "cpu" and w.versions.get("python") and w.versions.get("gradci") for w in workers)
    assert {j.worker for j in jobs} <= {w.name for w in workers}  # jobs name the worker that heartbeats


def test_forward_and_reverse_jobs_are_compared_and_only_the_wrong_mode_fails(redis_service: Service) -> None:
    # Each backend is a job of its own; the cells still meet the other mode's, as in `gradci check`.
    run_id = redis_service.submit(scenarios="culprit/*", backends=["torch-rev", "torch-func-fwd"])
    redis_service.wait_finished(run_id)
    results = {r.backend: r for r in results_of(redis_service.database_url, run_id) if r.dtype == "float32"}
    assert results["torch-rev"].status == "pass", results["torch-rev"].message
    assert results["torch-func-fwd"].status == "fail"
    assert "finds this one wrong" in results["torch-func-fwd"].message
    assert len(jobs_of(redis_service.database_url, run_id)) == 2


def test_a_scenario_without_a_jax_f_gets_no_jax_job_only_a_count(redis_service: Service) -> None:
    run_id = redis_service.submit(scenarios="culprit/*", backends=["torch-rev", "jax-rev"], dtypes=["float32"])
    run = redis_service.wait_finished(run_id)
    results = results_of(redis_service.database_url, run_id)
    assert {r.backend for r in results} == {"torch-rev"}  # not a jax-rev skip: no such cell at all
    assert run["omitted_cells"] == 1 and run["counts"]["skip"] == 0
    assert {j.backend for j in jobs_of(redis_service.database_url, run_id)} == {"torch-rev"}
    with redis_service.client() as client:
        assert "1 cell not made" in client.get(f"/runs/{run_id}").text
        # Where the scenario is defined, relative to the repository: its Scenario(...) call's line.
        source = (Path(__file__).parents[1] / "data" / "projects" / "service_checks" / "gradci_scenarios.py")
        line = next(i for i, text in enumerate(source.read_text().splitlines(), 1) if '"culprit/tanh-jvp"' in text)
        cell_page = client.get(f"/runs/{run_id}/cells/{results[0].id}").text
        assert f'<code id="defined-at">gradci_scenarios.py:{line}</code>' in cell_page


def test_a_runs_repeats_reach_every_cell(redis_service: Service) -> None:
    plain, repeated = (redis_service.submit(scenarios="ok/poly", backends=["torch-rev"], dtypes=["float64"], **extra)
                       for extra in ({}, {"repeats": 2}))
    spreads = [[r.repeat_spread for r in results_of(redis_service.database_url, redis_service.wait_finished(run_id)["id"])]
               for run_id in (plain, repeated)]
    assert spreads == [[None], [0.0]]  # not repeated; repeated, bitwise identical


def test_a_redelivered_job_rewrites_its_rows(redis_service: Service) -> None:
    from celery import Celery

    run_id = redis_service.submit(scenarios="ok/poly", backends=["fd"])
    redis_service.wait_finished(run_id)
    before = {(r.scenario, r.backend, r.device, r.dtype): r.id for r in results_of(redis_service.database_url, run_id)}
    (job,) = jobs_of(redis_service.database_url, run_id)
    # As if its worker died after storing the cells: running, its lease lapsed, the message delivered again.
    with session_scope(redis_service.database_url) as session:
        stale = session.get(Job, job.id)
        stale.status, stale.lease_renewed_at = "running", utcnow() - timedelta(hours=1)
        session.get(Run, run_id).status = "running"
    sender = Celery(broker=redis_service.broker_url)
    sender.send_task("gradci.run_job", args=[job.id], queue="cpu")
    wait_for(lambda: jobs_of(redis_service.database_url, run_id)[0].status == "done", "the redelivered job")
    run = redis_service.wait_finished(run_id)
    after = results_of(redis_service.database_url, run_id)
    assert_each_cell_once(after)
    assert {(r.scenario, r.backend, r.device, r.dtype): r.id for r in after} == before
    assert jobs_of(redis_service.database_url, run_id)[0].attempts == 2
    assert run["status"] == "passed" and run["counts"]["pass"] == 1 and run["counts"]["skip"] == 1
    # A delivery of a finished job is dropped: no attempt counted, nothing rewritten.
    sender.send_task("gradci.run_job", args=[job.id], queue="cpu")
    time.sleep(2)
    assert jobs_of(redis_service.database_url, run_id)[0].attempts == 2
    sender.close()


def test_a_job_whose_worker_vanished_is_sent_again(redis_service: Service) -> None:
    """A worker that died whole (not just its pool process) leaves its job running; the live
    workers notice its heartbeat stopped and send the job again."""
    run_id = redis_service.submit(scenarios="ok/trig", backends=["fd"], dtypes=["float64"])
    redis_service.wait_finished(run_id)
    (job,) = jobs_of(redis_service.database_url, run_id)
    with session_scope(redis_service.database_url) as session:
        orphan = session.get(Job, job.id)
        orphan.status, orphan.worker, orphan.started_at = "running", "cpu-1@vanished", utcnow() - timedelta(hours=1)
        run = session.get(Run, run_id)
        run.status, run.finished_at = "running", None
    wait_for(lambda: jobs_of(redis_service.database_url, run_id)[0].status == "done", "the orphaned job to run again")
    assert jobs_of(redis_service.database_url, run_id)[0].attempts == 2
    assert redis_service.wait_finished(run_id)["status"] == "passed"
    assert_each_cell_once(results_of(redis_service.database_url, run_id))


def test_cancellation_stops_running_jobs_and_drops_waiting_ones(redis_service: Service) -> None:
    run_id = redis_service.submit(scenarios="slow/*", backends=["fd"], dtypes=["float64"])
    wait_for(lambda: results_of(redis_service.database_url, run_id), "a first slow cell", interval_s=0.1)
    with redis_service.client() as client:
        response = client.post(f"/api/runs/{run_id}/cancel")
    assert response.status_code in (200, 202), response.text
    run = redis_service.wait_finished(run_id)
    assert run["status"] == "cancelled"
    results = results_of(redis_service.database_url, run_id)
    assert_each_cell_once(results)
    assert len(results) < 6
    jobs = jobs_of(redis_service.database_url, run_id)
    assert {j.status for j in jobs} <= {"cancelled", "done"} and jobs[-1].status == "cancelled"


def test_the_api_serves_with_uvicorns_c_parser_and_event_loop(redis_service: Service) -> None:
    """``gradci api`` as deployed: uvicorn picks httptools and uvloop up by itself when they are
    installed (dependencies of gradci), and the webhook intake's p99 depends on it."""
    assert redis_service.api is not None
    with open(f"/proc/{redis_service.api.pid}/maps") as maps:
        loaded = {name for line in maps for name in ("httptools", "uvloop") if f"/{name}/" in line}
    assert loaded == {"httptools", "uvloop"}, f"the API process loaded only {sorted(loaded)} of httptools, uvloop"


def test_gradci_api_with_two_workers_serves_from_two_processes(redis_service: Service, tmp_path: Path) -> None:
    port = free_port()
    api = start_api(redis_service.env, tmp_path, port, "--workers", "2")
    try:
        wait_for(lambda: api_answers(f"http://127.0.0.1:{port}"), "gradci api --workers 2 to answer", timeout_s=90)
        wait_for(lambda: len([pid for pid in descendants(api.pid) if "spawn_main" in command_line(pid)]) == 2,
                 "uvicorn's two worker processes", timeout_s=30)
    finally:
        stop(api)
    assert not alive(descendants(api.pid))


def test_the_app_gradci_api_serves_hides_the_process_that_serves_it(tmp_path: Path) -> None:
    """uvicorn's worker processes start afresh (exec), inspectable again: the app's factory makes each
    non-dumpable, as ``gradci api`` makes itself."""
    probe = ("from gradci.cli.serve import api_app; from gradci.services.secrecy import libc; "
             "before = libc().prctl(3, 0, 0, 0, 0); api_app(); print(before, libc().prctl(3, 0, 0, 0, 0))")  # PR_GET_DUMPABLE
    done = subprocess.run([sys.executable, "-P", "-c", probe], env=service_env(workdir=str(tmp_path)), cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["1", "0"]


def test_an_unknown_commit_ends_the_run_with_a_clear_error(redis_service: Service) -> None:
    run_id = redis_service.submit(sha="0" * 40)
    run = redis_service.wait_finished(run_id)
    assert run["status"] == "error"
    assert f"commit '{'0' * 40}' does not exist" in run["error_message"]


# --- embedded -----------------------------------------------------------------------------------


def test_embedded_mode_serves_the_same_path(checks_project: tuple[Path, str], tmp_path: Path) -> None:
    """`gradci up` on SQLite and the SQLite transport: the demo, a repository run submitted with
    `gradci submit --wait`, `gradci status`, and a killed worker restarted by the supervisor."""
    repo, sha = checks_project
    # Named gradci, in the folder `gradci up` runs in: with an editable install a folder of that name
    # on the import path would become the `gradci` package; the services it starts never import from it.
    workdir, port = tmp_path / "gradci", free_port()
    env = service_env(workdir=str(workdir), worker_heartbeat_s="1", job_chunk_size="2")
    up = spawn([sys.executable, "-m", "gradci", "up", "--demo", "--port", str(port), "--backends", "fd",
                "--dtypes", "float64", "--scenarios", "elementary/num-to-num/*"], env, tmp_path / "up.log", cwd=tmp_path)
    database_url = f"sqlite:///{workdir / 'gradci.db'}"
    try:
        wait_for(lambda: "serving" in (tmp_path / "up.log").read_text(), "the demo run", timeout_s=150)
        output = (tmp_path / "up.log").read_text()
        assert "run 1: passed" in output and f"http://127.0.0.1:{port}/runs/1" in output
        token = (workdir / "api-token").read_text().strip()
        assert token in output and (workdir / "api-token").stat().st_mode & 0o077 == 0
        assert len(results_of(database_url, 1)) == 12

        first_worker = _worker_pids(database_url)
        os.kill(first_worker.pop(), signal.SIGKILL)
        wait_for(lambda: _worker_pids(database_url) - first_worker, "the supervisor to restart the worker", timeout_s=60)

        cli = [sys.executable, "-m", "gradci"]
        submitted = subprocess.run([*cli, "submit", "--server", f"http://127.0.0.1:{port}", "--repo", str(repo),
                                    "--sha", sha, "--scenarios", "ok/*", "--backends", "fd", "--wait"],
                                   env=env, cwd=tmp_path, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
        assert submitted.returncode == 0, submitted.stdout + submitted.stderr
        assert "run 2 queued" in submitted.stdout and "run 2: passed" in submitted.stdout
        results = results_of(database_url, 2)
        assert_each_cell_once(results)
        assert len(results) == 3 * 2 and {r.status for r in results} == {"pass", "skip"}
        status = subprocess.run([*cli, "status", "2", "--server", f"http://127.0.0.1:{port}"], env=env, cwd=tmp_path,
                                capture_output=True, text=True, timeout=60)
        assert status.returncode == 0 and "run 2: passed" in status.stdout
    finally:
        stop(up, grace_s=30)
        dispose_engine(database_url)
    assert up.returncode == 0, (tmp_path / "up.log").read_text()[-3000:]


def _worker_pids(database_url: str) -> set[int]:
    """Worker names are "<device>-<pid>@<host>": the pids of those that beat in the last 3 s."""
    with session_scope(database_url, readonly=True) as session:
        names = session.scalars(select(Worker.name).where(Worker.last_heartbeat >= utcnow() - timedelta(seconds=3)))
        return {int(name.split("@")[0].rsplit("-", 1)[1]) for name in names}

