"""Fixtures of the webhook tests, (this folder's conftest): the
settings of a service that accepts webhooks signed with ``SECRET``, and an in-process client of it."""
from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from gradci.services.api import webhooks
from gradci.services.api.app import create_app
from gradci.services.settings import Settings
from tests.support.webhook_client import SECRET


@pytest.fixture(autouse=True)
def announcements_sent() -> Iterator[None]:
    """After each test, wait until the API process's announcements are all sent. They go out on a
    process-wide pool after the answer, so one queued behind a send to a hanging broker could otherwise
    land in the next test's freshly flushed Redis."""
    yield
    # Every thread of the pool at the barrier at once: nothing submitted before is still running.
    everyone = threading.Barrier(webhooks.ANNOUNCE_THREADS + 1, timeout=60)
    for _ in range(webhooks.ANNOUNCE_THREADS):
        webhooks._announcer().submit(everyone.wait)
    everyone.wait()


@pytest.fixture
def settings(clean_environment: None, database_url: str, redis_url: str, tmp_path: Path) -> Settings:
    return Settings(database_url=database_url, broker_url=redis_url, workdir=tmp_path / "work",
                    github_webhook_secret=SECRET)


@pytest.fixture
def client(settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(settings)) as test_client:
        yield test_client
