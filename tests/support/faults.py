"""Private PostgreSQL and Redis servers a test may stop and start at will (the shared ones must never
be touched), and a service (API over HTTP + ``gradci worker``) running on them.

PostgreSQL refuses to run as root: ``initdb`` and ``postgres`` run as the ``postgres`` user, in a
folder of their own that user can reach. Redis runs without persistence, as the issue's outage did:
a restart loses every message.
"""
from __future__ import annotations

import dataclasses
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import psycopg
import redis

from gradci._testing.processes import free_port, spawn, wait_for
from gradci._testing.service import Service, running_service
from gradci.services.db.migrate import upgrade
from gradci.services.db.session import dispose_engine

REDIS_SERVER = shutil.which("redis-server") or "/usr/bin/redis-server"
POSTGRES_BIN = Path(shutil.which("postgres") or "/usr/local/bin/postgres").parent
LOOPBACK = "127.0.0.1"
AS_POSTGRES = ["setpriv", "--reuid", "postgres", "--regid", "postgres", "--init-groups"]


def available() -> str | None:
    """Why private servers cannot run here, or None."""
    if not Path(REDIS_SERVER).exists():
        return f"no redis-server at {REDIS_SERVER}"
    if not (POSTGRES_BIN / "initdb").exists():
        return f"no initdb in {POSTGRES_BIN}"
    if os.geteuid() != 0 and os.environ.get("USER") != "postgres":
        return "PostgreSQL's servers must run as the postgres user: needs root to switch to it"
    return None


class PrivateRedis:
    """``host``: the address it listens on (a test network's, for workers in other namespaces)."""

    def __init__(self, folder: Path, host: str = LOOPBACK) -> None:
        self.folder, self.host, self.port = folder, host, free_port()
        self.url = f"redis://{host}:{self.port}/0"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        # Protected mode refuses every client but loopback's unless a password is set.
        reach = [] if self.host == LOOPBACK else ["--protected-mode", "no"]
        self.process = spawn([REDIS_SERVER, "--port", str(self.port), "--bind", self.host, *reach, "--save", "",
                              "--appendonly", "no", "--dir", str(self.folder)], dict(os.environ),
                             self.folder / "redis.log")
        wait_for(self._answers, "the private Redis", timeout_s=20, interval_s=0.1)

    def kill(self) -> None:
        """Gone at once, and everything it held with it (no persistence)."""
        if self.process is not None:
            self.process.kill()
            self.process.wait()
            self.process = None

    def _answers(self) -> bool:
        try:
            with redis.Redis.from_url(self.url, socket_connect_timeout=1) as client:
                return bool(client.ping())
        except redis.ConnectionError:
            return False


class PrivatePostgres:
    """``host``: the address it listens on; ``clients``: the network (CIDR) it trusts besides
    loopback, e.g. a test network's hosts in other namespaces."""

    def __init__(self, folder: Path, host: str = LOOPBACK, clients: str | None = None) -> None:
        self.folder, self.host, self.clients, self.port = folder, host, clients, free_port()
        self.data = folder / "data"
        self.url = f"postgresql+psycopg://postgres@{host}:{self.port}/gradci"
        self.process: subprocess.Popen[bytes] | None = None

    def create(self) -> None:
        self.folder.chmod(0o755)
        self.data.mkdir()
        shutil.chown(self.data, "postgres", "postgres")
        subprocess.run([*AS_POSTGRES, str(POSTGRES_BIN / "initdb"), "-D", str(self.data), "-U", "postgres",
                        "--auth=trust", "-E", "UTF8", "--no-sync"], check=True, capture_output=True, cwd=self.folder)
        if self.clients:  # initdb trusts loopback only
            with open(self.data / "pg_hba.conf", "a") as hba:
                hba.write(f"host all all {self.clients} trust\n")
        self.start()
        with psycopg.connect(host=self.host, port=self.port, user="postgres", dbname="postgres",
                             autocommit=True) as admin:
            admin.execute("CREATE DATABASE gradci")
        upgrade(self.url)

    def start(self) -> None:
        # Durability is not under test: fsync off keeps the restart quick on a busy machine.
        self.process = spawn([*AS_POSTGRES, str(POSTGRES_BIN / "postgres"), "-D", str(self.data), "-p", str(self.port),
                              "-k", str(self.data), "-c", f"listen_addresses={self.host}", "-c", "fsync=off",
                              "-c", "full_page_writes=off", "-c", "synchronous_commit=off"],
                             dict(os.environ), self.folder / "postgres.log", cwd=self.data)
        wait_for(self._answers, "the private PostgreSQL", timeout_s=30, interval_s=0.1)

    def stop(self) -> None:
        """A fast shutdown, as a restart does: every connection is cut."""
        if self.process is not None:
            self.process.send_signal(signal.SIGINT)
            self.process.wait(timeout=30)
            self.process = None

    def _answers(self) -> bool:
        try:
            with psycopg.connect(host=self.host, port=self.port, user="postgres", dbname="postgres",
                                 connect_timeout=1):
                return True
        except psycopg.OperationalError:
            return False


@dataclasses.dataclass
class FaultyService(Service):
    """A ``Service`` on private servers, with a worker of concurrency 2 the test may kill."""
    redis: PrivateRedis | None = None
    postgres: PrivatePostgres | None = None

    def start_worker(self, device: str = "cpu", concurrency: int | None = 2) -> subprocess.Popen[bytes]:
        return super().start_worker(device, concurrency)

    def kill_worker(self) -> None:
        """SIGKILL to the worker's whole process group: main process, pool and runners at once."""
        assert self.worker is not None
        os.killpg(self.worker.pid, signal.SIGKILL)
        self.worker.wait()

    def health(self) -> tuple[int, float]:
        """(status code of /api/health, seconds it took)."""
        started = time.monotonic()
        response = httpx.get(f"{self.url}/api/health", timeout=30)
        return response.status_code, time.monotonic() - started


@contextmanager
def start_faulty_service(repo: Path, sha: str, **settings: str) -> Iterator[FaultyService]:
    """Private PostgreSQL and Redis, ``gradci api`` and one ``gradci worker`` (concurrency 2), all
    stopped at the end."""
    folder = Path(tempfile.mkdtemp(prefix="gradci-faults-"))
    folder.chmod(0o755)  # the postgres user must reach its data folder inside
    postgres, broker = PrivatePostgres(folder / "postgres"), PrivateRedis(folder)
    (folder / "postgres").mkdir()
    logs = folder / "logs"
    logs.mkdir()
    workdir = folder / "work"  # private to root, as a pytest tmp_path is (the folder above is not)
    workdir.mkdir(mode=0o700)
    try:
        postgres.create()
        broker.start()
        with running_service(postgres.url, broker.url, workdir, logs, repo=repo, sha=sha, concurrency=2,
                             service_class=FaultyService, **settings) as service:
            assert isinstance(service, FaultyService)
            service.redis, service.postgres = broker, postgres
            yield service
    finally:
        for log in ("gradci.worker.log", "api.log"):  # shown by pytest when a test failed
            if (logs / log).exists():
                print(f"--- {log} ---\n" + (logs / log).read_text(errors="replace")[-8000:])
        dispose_engine(postgres.url)
        postgres.stop()
        broker.kill()
        shutil.rmtree(folder, ignore_errors=True)
