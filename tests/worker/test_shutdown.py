"""Stopping the service leaves nothing behind: ``gradci worker`` stopped by SIGTERM or SIGINT in the
middle of a job, and ``gradci up`` stopped by Ctrl-C, SIGTERM or SIGTERM to its process group,
during a run or after it: within 10 s no process of theirs runs (runners included), and the job
in progress is run again by the next worker, not lost."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.service_processes import (alive, descendants, make_repository, runners_below, running_service,
                                     start_worker, wait_gone)
from tests.test_integration import (Service, assert_each_cell_once, free_port, results_of, service_env, spawn,
                                    stop, wait_for)

pytestmark = pytest.mark.integration

STOP_WITHIN_S = 10.0
SLOW_SCENARIOS = '''
import time

import numpy as np

from gradci import Scenario
from gradci.scenarios.authoring.namespace import namespace


def slow(x):
    time.sleep(0.03)  # finite differences call it a few dozen times: about a second a cell
    xp = namespace(x)
    return xp.sum(x ** 2)


def scenarios():
    return [Scenario(f"slow/{i}", "gradient", slow, np.array([0.1 * i, 0.2]), dtypes=("float64",)) for i in range(6)]
'''
FILES = {"gradci.toml": '[scenarios]\nmodules = ["slow_scenarios"]\n[matrix]\nbackends = ["fd"]\ndtypes = ["float64"]\n',
         "slow_scenarios.py": textwrap.dedent(SLOW_SCENARIOS)}


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    root = tmp_path_factory.mktemp("slow-repo")
    return root, make_repository(root, FILES)


@pytest.fixture
def service(postgres_url: str, redis_url: str, repository: tuple[Path, str], tmp_path: Path) -> Iterator[Service]:
    (tmp_path / "logs").mkdir()
    with running_service(postgres_url, redis_url, *repository, tmp_path / "work", tmp_path / "logs",
                         concurrency=2, job_chunk_size="3") as the_service:
        yield the_service


def running_tree(root_pid: int) -> set[int]:
    """The processes below ``root_pid`` once runners are at work (a job is in its cells)."""
    wait_for(lambda: runners_below(root_pid), "a runner checking cells", timeout_s=90, interval_s=0.1)
    return descendants(root_pid)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_stopped_worker_leaves_nothing_and_its_jobs_run_again(service: Service, signum: int) -> None:
    run_id = service.submit()
    assert service.worker is not None
    tree = running_tree(service.worker.pid)
    wait_for(lambda: results_of(service.database_url, run_id), "a first cell", interval_s=0.1)
    service.worker.send_signal(signum)
    assert wait_gone(tree, STOP_WITHIN_S) < STOP_WITHIN_S
    assert len(results_of(service.database_url, run_id)) < 6, "the run finished before the worker was stopped"
    service.worker.wait()
    service.worker = start_worker(service.env, service.logs)
    run = service.wait_finished(run_id)
    results = results_of(service.database_url, run_id)
    assert_each_cell_once(results)
    assert run["status"] == "passed" and len(results) == 6 and {r.status for r in results} == {"pass"}


def _up(tmp_path: Path, workdir: Path, port: int) -> subprocess.Popen[bytes]:
    env = service_env(workdir=str(workdir), worker_heartbeat_s="1", job_chunk_size="3")
    return spawn([sys.executable, "-m", "gradci", "up", "--port", str(port)], env, tmp_path / "up.log", cwd=tmp_path)


@pytest.mark.parametrize(("how", "during_run"), [("SIGINT", True), ("SIGTERM to its group", True),
                                                  ("SIGTERM", False)])
def test_gradci_up_stops_with_nothing_left(repository: tuple[Path, str], tmp_path: Path, how: str,
                                           during_run: bool) -> None:
    from gradci.services.db.session import dispose_engine
    import httpx

    repo, sha = repository
    workdir, port = tmp_path / "gradci", free_port()
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
            tree = descendants(up.pid)
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
