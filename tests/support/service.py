"""Helpers for tests of real service processes: their process trees, a service on PostgreSQL and
Redis started by the test (API + ``gradci worker``), and git repositories of scenarios."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.conftest import emptied
from tests.test_integration import Service, _healthy, free_port, git, service_env, spawn, stop, wait_for

TOKEN = "integration-token"


def children_map() -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                ppid = int(stat.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    return children


def descendants(pid: int) -> set[int]:
    """``pid`` and every process below it, now."""
    tree, found, todo = children_map(), set(), [pid]
    while todo:
        current = todo.pop()
        if current not in found:
            found.add(current)
            todo.extend(tree.get(current, []))
    return found


def command_line(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return handle.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def alive(pids: set[int]) -> set[int]:
    """Those of ``pids`` still running (a zombie waiting for its parent is not)."""
    running = set()
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as stat:
                state = stat.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state not in ("Z", "X"):
            running.add(pid)
    return running


def runners_below(pid: int) -> set[int]:
    return {p for p in descendants(pid) if "gradci.worker.runner_child" in command_line(p) or "gradci.worker.sandbox" in command_line(p)}


def wait_gone(pids: set[int], timeout_s: float) -> float:
    """Seconds until none of ``pids`` runs; fails naming the survivors after ``timeout_s``."""
    start = time.monotonic()
    while alive(pids):
        if time.monotonic() - start > timeout_s:
            left = {pid: command_line(pid)[:120] for pid in alive(pids)}
            raise AssertionError(f"processes left after {timeout_s} s: {left}")
        time.sleep(0.1)
    return time.monotonic() - start


def make_repository(root: Path, files: dict[str, str]) -> str:
    """A git repository holding ``files``; its head sha."""
    root.mkdir(parents=True, exist_ok=True)
    git(root, "init", "-q", "-b", "main")
    for name, text in files.items():
        (root / name).write_text(text)
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "scenarios")
    return git(root, "rev-parse", "HEAD")


@contextmanager
def running_service(database_url: str, broker_url: str, repo: Path, sha: str, workdir: Path, logs: Path,
                    concurrency: int = 2, **settings: str) -> Iterator[Service]:
    """The API (uvicorn) and one ``gradci worker --concurrency N`` on PostgreSQL (emptied first) and Redis."""
    emptied(database_url)
    env = service_env(database_url=database_url, broker_url=broker_url, workdir=str(workdir), api_token=TOKEN,
                      worker_heartbeat_s="1", **settings)
    port = free_port()
    api = spawn([sys.executable, "-m", "uvicorn", "--factory", "gradci.services.api.app:create_app", "--host", "127.0.0.1",
                 "--port", str(port)], env, logs / "api.log")
    service = Service(url=f"http://127.0.0.1:{port}", database_url=database_url, broker_url=broker_url, repo=repo,
                      sha=sha, workdir=workdir, logs=logs, env=env)
    service.worker = start_worker(env, logs, concurrency)
    try:
        wait_for(lambda: _healthy(service.url), "the API and a cpu worker", timeout_s=90)
        yield service
    finally:
        stop(api)
        if service.worker is not None:
            stop(service.worker)


def start_worker(env: dict[str, str], logs: Path, concurrency: int = 2) -> subprocess.Popen[bytes]:
    return spawn([sys.executable, "-m", "gradci", "worker", "--device", "cpu", "--concurrency", str(concurrency)],
                 env, logs / "gradci.worker.log")
