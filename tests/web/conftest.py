"""Fixtures of the dashboard tests."""
from __future__ import annotations

from collections.abc import Iterator

import pytest

from gradci._testing.databases import emptied, flushed
from gradci._testing.service import Service, running_service
from tests.support.projects import project_repository


@pytest.fixture(scope="module")
def dashboard_service(postgres_database: str, redis_database: str,
                      tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    """``gradci api`` (API and dashboard) and one cpu worker on PostgreSQL and Redis, checking
    ``tests/data/projects/dashboard``: quick scenarios, one that crashes, and slow ones (slow only
    where torch computes, so a run of them lasts long enough to watch its page move). One scenario
    per job."""
    repo = tmp_path_factory.mktemp("dashboard")
    sha = project_repository("dashboard", repo)
    with running_service(emptied(postgres_database), flushed(redis_database), tmp_path_factory.mktemp("work"),
                         tmp_path_factory.mktemp("logs"), repo=repo, sha=sha, concurrency=1, job_chunk_size="1",
                         worker_heartbeat_s="1", cell_timeout_s="60") as service:
        yield service
