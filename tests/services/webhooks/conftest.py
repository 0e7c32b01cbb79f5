"""Fixtures of the webhook tests, (this folder's conftest): the
settings of a service that accepts webhooks signed with ``SECRET``, and an in-process client of it."""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from gradci.services.api.app import create_app
from gradci.services.settings import Settings
from tests.support.webhook_client import SECRET


@pytest.fixture
def settings(clean_environment: None, database_url: str, redis_url: str, tmp_path: Path) -> Settings:
    return Settings(database_url=database_url, broker_url=redis_url, workdir=tmp_path / "work",
                    github_webhook_secret=SECRET)


@pytest.fixture
def client(settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(settings)) as test_client:
        yield test_client
