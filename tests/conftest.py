"""Shared fixtures: real databases and a real broker, never mocks of them.

PostgreSQL: one uniquely named database per test session, created in the cluster behind
``GRADCI_TEST_POSTGRES_URL`` (default: the local ``test`` database, trust auth), migrated with the
real Alembic migrations, emptied between tests and dropped at the end. SQLite: a migrated file in
the test's ``tmp_path``. Redis: a database number of its own (``GRADCI_TEST_REDIS_URL``), flushed
before each test that uses it. A service that is not running skips its tests with the reason;
``make test`` starts both first.
"""
from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.engine import make_url

from gradci.services.db.migrate import upgrade
from gradci.services.db.session import dispose_engine, engine_for, session_scope
from gradci.services.settings import get_settings
from tests.databases import admin_connection, scratch_database
from gradci.scenarios.contract.simulated_gpus import INVENTORY_VARIABLE

POSTGRES_ADMIN_URL = os.environ.get("GRADCI_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
REDIS_URL = os.environ.get("GRADCI_TEST_REDIS_URL", "redis://127.0.0.1:6379/13")
TABLES = ("results", "scenario_catalog", "jobs", "deliveries", "github_reports", "run_reports", "runs", "repositories",
          "workers")


@pytest.fixture
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No GRADCI_* variable from the developer's shell leaks into a test's settings."""
    for key in list(os.environ):
        if key.startswith("GRADCI_") and not key.startswith("GRADCI_TEST_"):
            monkeypatch.delenv(key)
    get_settings.cache_clear()
    yield
    get_settings.cache_clear()


@pytest.fixture(scope="session")
def postgres_database() -> Iterator[str]:
    """URL of a fresh, migrated PostgreSQL database for this test session."""
    import psycopg

    try:
        admin_connection(POSTGRES_ADMIN_URL).close()
    except psycopg.OperationalError as exc:
        pytest.skip(f"PostgreSQL is not reachable at {make_url(POSTGRES_ADMIN_URL).render_as_string()}: {exc}")
    with scratch_database(POSTGRES_ADMIN_URL, f"gradci_test_{os.getpid()}") as url:
        yield url


def emptied(database_url: str) -> str:
    """The session's PostgreSQL database with every table emptied. A service started over it must
    begin so: its reconciler would otherwise plan the runs an earlier test left queued, and its jobs
    would wait behind theirs."""
    with engine_for(database_url).begin() as connection:
        connection.exec_driver_sql(f"TRUNCATE {', '.join(TABLES)} RESTART IDENTITY CASCADE")
    return database_url


@pytest.fixture
def postgres_url(postgres_database: str) -> str:
    """The session's PostgreSQL database, emptied for this test."""
    return emptied(postgres_database)


@pytest.fixture
def sqlite_url(tmp_path: Any) -> Iterator[str]:
    """A migrated SQLite file of this test's own."""
    url = f"sqlite:///{tmp_path / 'gradci.db'}"
    upgrade(url)
    yield url
    dispose_engine(url)


@pytest.fixture(params=["postgres", "sqlite"])
def database_url(request: pytest.FixtureRequest) -> str:
    """The test runs once on PostgreSQL and once on SQLite."""
    return request.getfixturevalue(f"{request.param}_url")


@pytest.fixture
def redis_url() -> str:
    import redis

    client = redis.Redis.from_url(REDIS_URL, socket_connect_timeout=3)
    try:
        client.flushdb()
    except redis.ConnectionError as exc:
        pytest.skip(f"Redis is not reachable at {REDIS_URL}: {exc}")
    finally:
        client.close()
    return REDIS_URL


STATUS_CYCLE = ("pass", "pass", "pass", "fail", "error", "skip", "xfail", "xpass")


def synthetic_cell(index: int, *, status: str | None = None, backend: str = "jax-rev",
                   device: str = "cpu", dtype: str = "float64") -> dict[str, Any]:
    """A cell as a runner streams it: the scenarios.cell.Cell fields plus a fingerprint, with
    values the engine produces (ingestion refuses any other)."""
    return {
        "scenario": f"scenario_{index:05d}",
        "operator": "gradient",
        "framework": "numpy" if backend == "fd" else backend.split("-")[0],
        "backend": backend,
        "mode": {"fd": "finite"}.get(backend, "forward" if backend.endswith("-fwd") else "reverse"),
        "device": device,
        "dtype": dtype,
        "status": status or STATUS_CYCLE[index % len(STATUS_CYCLE)],
        "max_abs_err": 1e-9 * index,
        "max_rel_err": 1e-10 * index,
        "atol": 1e-8,
        "rtol": 1e-6,
        "time_ms": 0.5 + index % 7,
        "first_call_ms": 20.0,
        "peak_memory_bytes": 1024 * index,
        "message": "" if index % 8 < 3 else f"cell {index}: max abs error above tolerance",
        "fingerprint": f"{index:064x}"[-64:],
    }


@pytest.fixture
def make_run() -> Callable[..., int]:
    """``make_run(url, **run_fields)`` → id of a new run committed in that database."""
    from gradci.services.db.runs import create_run

    def make(url: str, **fields: Any) -> int:
        with session_scope(url) as session:
            return create_run(session, **fields).id

    return make


@pytest.fixture
def cell_factory() -> Callable[..., dict[str, Any]]:
    """``cell_factory(index, status=..., backend=..., device=..., dtype=...)`` → a synthetic cell."""
    return synthetic_cell


# Two simulated GPUs (GRADCI_DEVICE_INVENTORY): routing, per-device workers and the GPU path are
# tested through the same code as real ones.
TWO_GPUS = [
    {"name": "NVIDIA H100 80GB HBM3", "capability": "90", "memory_total": 85_520_809_984,
     "memory_free": 80_000_000_000, "driver": "550.54.15", "cuda": "12.4"},
    {"name": "NVIDIA A100-SXM4-40GB", "capability": "80", "memory_total": 42_949_672_960},
]


@pytest.fixture
def two_gpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This process sees TWO_GPUS as its GPUs."""
    path = tmp_path / "gpus.json"
    path.write_text(json.dumps(TWO_GPUS))
    monkeypatch.setenv(INVENTORY_VARIABLE, str(path))
    return path
