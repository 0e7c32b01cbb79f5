"""Shared fixtures: real databases and a real broker, never mocks of them. Helpers live in
``tests/support``; fixtures live here and in each layer's conftest.py.

PostgreSQL: one uniquely named database per test session, created in the cluster behind
``GRADCI_TEST_POSTGRES_URL`` (default: the local ``test`` database, trust auth), migrated with the
real Alembic migrations, emptied between tests and dropped at the end. SQLite: a migrated file in
the test's ``tmp_path``. Redis: one database number per test session, claimed on the server behind
``GRADCI_TEST_REDIS_URL`` so that sessions running at once never share one, flushed before each test
(``redis_url``) or each service started on it. A server that is not running skips its tests with the
reason; ``make test`` starts both first.

Every test that needs PostgreSQL, Redis, Chromium or service processes is marked ``integration``:
``pytest -m "not integration and not slow"`` needs none of them, and a test of that subset that asks
for the session's PostgreSQL or Redis fails, saying so.
"""
from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.engine import make_url

from gradci._testing.databases import (
    POSTGRES_ADMIN_URL,
    RedisUnavailable,
    admin_connection,
    claimed_redis_database,
    emptied,
    flushed,
    scratch_database,
)
from gradci._testing.service import Service, running_service
from gradci.scenarios.contract.simulated_gpus import INVENTORY_VARIABLE
from gradci.services.db.migrate import upgrade
from gradci.services.db.session import dispose_engine, session_scope
from gradci.services.settings import get_settings
from tests.support.cells import TWO_GPUS, synthetic_cell
from tests.support.projects import project_repository

# The scenario projects under data/ are user repositories, some with tests of their own: not ours to collect.
collect_ignore_glob = ["data/*"]

SERVERS = {"postgres_database": "PostgreSQL", "redis_database": "Redis"}


def pytest_runtest_setup(item: pytest.Item) -> None:
    """A test that uses the session's PostgreSQL or Redis must be marked ``integration``."""
    if item.get_closest_marker("integration") is not None:
        return
    needs = [SERVERS[name] for name in SERVERS if name in getattr(item, "fixturenames", ())]
    callspec = getattr(item, "callspec", None)
    if callspec is not None and callspec.params.get("database_url") == "postgres":
        needs.append("PostgreSQL")
    if needs:
        pytest.fail(f"{item.nodeid} uses {' and '.join(sorted(set(needs)))} but is not marked integration: add "
                    "`pytestmark = pytest.mark.integration` to its module (or mark the test), so that "
                    "`pytest -m \"not integration\"` needs no server", pytrace=False)


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


@pytest.fixture(params=[pytest.param("postgres", marks=pytest.mark.integration), "sqlite"])
def database_url(request: pytest.FixtureRequest) -> str:
    """The test runs once on PostgreSQL (marked integration) and once on SQLite."""
    return request.getfixturevalue(f"{request.param}_url")


@pytest.fixture(scope="session")
def redis_database() -> Iterator[str]:
    """URL of the Redis database number claimed for this test session (not flushed: see ``redis_url``)."""
    try:
        with claimed_redis_database() as url:
            yield url
    except RedisUnavailable as exc:
        pytest.skip(str(exc))


@pytest.fixture
def redis_url(redis_database: str) -> str:
    """The session's Redis database, flushed for this test."""
    return flushed(redis_database)


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


@pytest.fixture
def two_gpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This process sees TWO_GPUS as its GPUs."""
    path = tmp_path / "gpus.json"
    path.write_text(json.dumps(TWO_GPUS))
    monkeypatch.setenv(INVENTORY_VARIABLE, str(path))
    return path


# --- a service (``gradci api`` + ``gradci worker``) on PostgreSQL and Redis ---------------------------


@pytest.fixture(scope="module")
def checks_project(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """``tests/data/projects/service_checks`` as a git repository: (path, head sha)."""
    root = tmp_path_factory.mktemp("service_checks")
    return root, project_repository("service_checks", root)


@pytest.fixture(scope="module")
def redis_service(postgres_database: str, redis_database: str, checks_project: tuple[Path, str],
                  tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    """``gradci api`` and one ``gradci worker --concurrency 1`` on the session's PostgreSQL (emptied)
    and Redis (flushed), checking ``checks_project``; for the test module."""
    with running_service(emptied(postgres_database), flushed(redis_database), tmp_path_factory.mktemp("work"),
                         tmp_path_factory.mktemp("logs"), repo=checks_project[0], sha=checks_project[1],
                         concurrency=1, job_chunk_size="2", cell_timeout_s="60", max_job_attempts="3",
                         worker_heartbeat_s="1") as service:
        yield service
