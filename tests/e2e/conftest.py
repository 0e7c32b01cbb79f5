"""Fixtures of the end-to-end tests (conftest.py one level up has the ``redis_service``)."""
from __future__ import annotations

from collections.abc import Iterator

import pytest

from gradci._testing.service import Service
from tests.support.app_service import APP_ID, FULL_NAME, INSTALLATION, app_service
from tests.support.fake_github import FakeGitHub
from tests.support.fake_oidc import FakeOidcIssuer
from tests.support.faults import FaultyService, start_faulty_service
from tests.support.projects import project_repository
from tests.support.uploads import REPO


@pytest.fixture(scope="module")
def faulty_service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FaultyService]:
    """A service on private PostgreSQL and Redis servers the test may stop and restart, checking
    ``tests/data/projects/faults``; heartbeats, leases and the reconciler's grace shortened."""
    repo = tmp_path_factory.mktemp("fault-project")
    sha = project_repository("faults", repo)
    with start_faulty_service(repo, sha, job_chunk_size="1", cell_timeout_s="60", max_job_attempts="3",
                              worker_heartbeat_s="0.5", worker_online_s="3", reconcile_grace_s="3") as running:
        yield running


@pytest.fixture(scope="module")
def github() -> Iterator[FakeGitHub]:
    """A fake GitHub on loopback, one per test module."""
    with FakeGitHub() as fake:
        yield fake


@pytest.fixture(scope="module")
def github_app() -> Iterator[tuple[FakeGitHub, str]]:
    """A fake GitHub on loopback with App ``APP_ID`` installed on ``FULL_NAME``: the fake, the App's key."""
    with FakeGitHub() as fake:
        yield fake, fake.as_app(APP_ID, {INSTALLATION: {FULL_NAME}})


@pytest.fixture(scope="module")
def issuer() -> Iterator[FakeOidcIssuer]:
    """A local OIDC issuer whose id tokens speak for the uploads' repository (REPO)."""
    with FakeOidcIssuer(REPO) as fake:
        yield fake


@pytest.fixture(scope="module")
def one_process_service(postgres_database, redis_database, mirror, github_app, tmp_path_factory) -> Iterator[Service]:
    """An App-mode service over the module's ``mirror``: one pool process, a job per scenario, every run full.

    One process runs the jobs in the order they were sent (or one sleeping job keeps it busy); every
    run full, so that which cells run first is the point and none is carried.
    """
    with app_service(postgres_database, redis_database, mirror[0], *github_app, tmp_path_factory, job_chunk_size="1",
                     full_run_repos=FULL_NAME) as running:
        yield running
