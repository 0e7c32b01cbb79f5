"""Fixtures of the worker tests."""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from gradci._testing.service import Service, running_service
from tests.support.projects import project_repository


@pytest.fixture(scope="module")
def slow_project(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """``tests/data/projects/slow`` as a git repository: six scenarios of about a second a cell."""
    root = tmp_path_factory.mktemp("slow-repo")
    return root, project_repository("slow", root)


@pytest.fixture
def fresh_service(postgres_url: str, redis_url: str, slow_project: tuple[Path, str], tmp_path: Path
                  ) -> Iterator[Service]:
    """A service of this test's own (``gradci api`` + ``gradci worker --concurrency 2``, chunks of 3)
    on emptied PostgreSQL and flushed Redis, checking ``slow_project``: the test may stop its worker."""
    repo, sha = slow_project
    with running_service(postgres_url, redis_url, tmp_path / "work", tmp_path / "logs", repo=repo, sha=sha,
                         concurrency=2, worker_heartbeat_s="1", job_chunk_size="3") as service:
        yield service
