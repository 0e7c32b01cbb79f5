"""Stopping the service leaves nothing behind: ``gradci worker`` stopped by SIGTERM or SIGINT in the
middle of a job, and ``gradci up`` stopped by Ctrl-C, SIGTERM or SIGTERM to its process group,
during a run or after it: within 10 s no process of theirs runs (runners and the CPU worker's control
node included), and the job in progress is run again by the next worker, not lost."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from gradci._testing.processes import (
    alive,
    command_line,
    descendants,
    free_port,
    runners_below,
    service_env,
    spawn,
    stop,
    wait_for,
    wait_gone,
)
from gradci._testing.service import Service, assert_each_cell_once, results_of
from gradci.worker.control_keeper import CONTROL_NODE_MODULE

pytestmark = pytest.mark.integration

STOP_WITHIN_S = 10.0


def running_tree(root_pid: int) -> set[int]:
    """The processes below ``root_pid`` once runners are at work (a job is in its cells)."""
    wait_for(lambda: runners_below(root_pid), "a runner checking cells", timeout_s=90, interval_s=0.1)
    return whole_tree(root_pid)


def whole_tree(root_pid: int) -> set[int]:
    """The processes below ``root_pid``, the CPU worker's control node among them."""
    wait_for(lambda: any(CONTROL_NODE_MODULE in command_line(pid) for pid in descendants(root_pid)),
             "the CPU worker's control node", timeout_s=60, interval_s=0.1)
    return descendants(root_pid)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_stopped_worker_leaves_nothing_and_its_jobs_run_again(fresh_service: Service, signum: int) -> None:
    run_id = fresh_service.submit()
    assert fresh_service.worker is not None
    tree = running_tree(fresh_service.worker.pid)
    wait_for(lambda: results_of(fresh_service.database_url, run_id), "a first cell", interval_s=0.1)
    fresh_service.worker.send_signal(signum)
    assert wait_gone(tree, STOP_WITHIN_S) < STOP_WITHIN_S
    assert len(results_of(fresh_service.database_url, run_id)) < 6, "the run finished before the worker was stopped"
    fresh_service.worker.wait()
    fresh_service.start_worker(concurrency=2)
    run = fresh_service.wait_finished(run_id)
    results = results_of(fresh_service.database_url, run_id)
    assert_each_cell_once(results)
    assert run["status"] == "passed" and len(results) == 6 and {r.status for r in results} == {"pass"}


def _up(tmp_path: Path, workdir: Path, port: int) -> subprocess.Popen[bytes]:
    """``gradci up`` started with SIGINT ignored, as a script's ``gradci up &`` (or a pytest run in the
    background) starts it: SIGINT must stop it all the same."""
    # The reconciler's grace shortened as the fault tests shorten it: a job whose worker died with the
    # group's SIGTERM is sent again within seconds of the restart, not after the default minute.
    env = service_env(workdir=str(workdir), worker_heartbeat_s="1", worker_online_s="5", reconcile_grace_s="5",
                      job_chunk_size="3")
    return spawn([sys.executable, "-m", "gradci", "up", "--port", str(port)], env, tmp_path / "up.log", cwd=tmp_path,
                 ignoring=(signal.SIGINT,))


@pytest.mark.parametrize(("how", "during_run"), [("SIGINT", True), ("SIGTERM to its group", True),
                                                  ("SIGTERM", False)])
def test_gradci_up_stops_with_nothing_left(slow_project: tuple[Path, str], tmp_path: Path, how: str,
                                           during_run: bool) -> None:
    import httpx

    from gradci.services.db.session import dispose_engine

    repo, sha = slow_project
    # Not "gradci": a folder of that name in the current folder of `gradci up` hides the package from
    # its runners (reported to the lead: issue 17).
    workdir, port = tmp_path / "state", free_port()
    up = _up(tmp_path, workdir, port)
    database_url = f"sqlite:///{workdir / 'gradci.db'}"
    try:
        wait_for(lambda: "serving" in (tmp_path / "up.log").read_text(), "gradci up to serve", timeout_s=120)
        token = (workdir / "api-token").read_text().strip()
        client = httpx.Client(base_url=f"http://127.0.0.1:{port}", headers={"Authorization": f"Bearer {token}"})
        run_id = client.post("/api/runs", json={"repo": str(repo), "sha": sha}).json()["id"]
        if during_run:
            wait_for(lambda: results_of(database_url, run_id), "a first cell", interval_s=0.1)
            tree = running_tree(up.pid)
        else:
            wait_for(lambda: client.get(f"/api/runs/{run_id}").json()["status"] == "passed", "the run")
            tree = whole_tree(up.pid)
        client.close()
        assert len(tree) >= 3  # gradci up, the API, the worker (and its pool, and their runners)
        if how == "SIGTERM to its group":
            os.killpg(up.pid, signal.SIGTERM)
        else:
            up.send_signal(getattr(signal, how))
        assert wait_gone(tree, STOP_WITHIN_S) < STOP_WITHIN_S
        assert up.wait() == 0
        if how == "SIGTERM to its group":  # the next start runs the jobs that were in progress
            assert len(results_of(database_url, run_id)) < 6
            up = _up(tmp_path, workdir, port)
            wait_for(lambda: len(results_of(database_url, run_id)) == 6, "the run's cells after a restart")
            assert_each_cell_once(results_of(database_url, run_id))
    finally:
        stop(up, grace_s=STOP_WITHIN_S)
        dispose_engine(database_url)
    assert not alive(descendants(up.pid) - {up.pid})
