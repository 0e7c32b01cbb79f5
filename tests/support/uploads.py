"""The upload tests' service and their requests: one repository, a fake GitHub and a local OIDC issuer.

``tests/e2e/test_uploads.py`` (uploads as a project's CI sends them) and ``test_upload_attacks.py``
(uploads as an attacker sends them) share them.
"""
from __future__ import annotations

import contextlib
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from gradci._testing.databases import emptied, flushed
from gradci._testing.service import GRADCI, Service, running_service
from tests.support.cells import synthetic_cell
from tests.support.fake_github import FakeGitHub
from tests.support.fake_oidc import FakeOidcIssuer

REPO = "octo/uploads"
AUDIENCE = "https://gradci.e2e"
PUBLIC_URL = "http://gradci.example"


@contextlib.contextmanager
def upload_service(postgres_database: str, redis_database: str, github: FakeGitHub, issuer: FakeOidcIssuer,
                   tmp_path_factory: pytest.TempPathFactory, **settings: str) -> Iterator[Service]:
    """``gradci api`` and a cpu worker on PostgreSQL (emptied) and Redis, reporting to the fake ``github``,
    trusting id tokens of the local ``issuer``, REPO registered (GRADCI_ALLOWED_REPOS); its logs printed
    when it stops, for the failure that stopped it."""
    with running_service(emptied(postgres_database), flushed(redis_database), tmp_path_factory.mktemp("work"),
                         tmp_path_factory.mktemp("logs"), github_token="gh-token", github_api_url=github.url,
                         public_url=PUBLIC_URL, oidc_issuer=issuer.url, oidc_audience=AUDIENCE, allowed_repos=REPO,
                         worker_heartbeat_s="1", **settings) as service:
        try:
            yield service
        finally:
            print(service.log("api.log")[-3000:], service.log("gradci.worker.log")[-3000:])


def gradci(service: Service, *argv: str, env: dict[str, str] | None = None,
           cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """The ``gradci`` command with the service's settings (``env``: instead, for a CI job's)."""
    return subprocess.run([*GRADCI, *argv], env=env or service.env, cwd=cwd or service.workdir, capture_output=True,
                          text=True, timeout=300)


def new_token(service: Service, full_name: str = REPO, revoked: bool = False) -> str:
    """An upload token of ``full_name`` made with ``gradci tokens create`` (and revoked, if asked)."""
    made = gradci(service, "tokens", "create", full_name)
    assert made.returncode == 0, made.stderr
    token = made.stdout.strip().splitlines()[-1]  # alone on the last line
    if revoked:
        token_id = made.stdout.split("upload token ")[1].split()[0]
        assert gradci(service, "tokens", "revoke", token_id).returncode == 0
    return token


def post(service: Service, body: dict[str, Any] | bytes, credential: str | None) -> httpx.Response:
    """``POST /api/uploads`` of ``body`` with ``credential`` as the bearer token (None: none)."""
    headers = {"Authorization": f"Bearer {credential}"} if credential else {}
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    return httpx.post(f"{service.url}/api/uploads", content=content, timeout=60,
                      headers={**headers, "Content-Type": "application/json"})


def cells(*names: str, status: str = "pass") -> list[dict[str, Any]]:
    """One torch-rev cell of each scenario name, all with ``status``."""
    return [dict(synthetic_cell(index, backend="torch-rev", status=status), scenario=name)
            for index, name in enumerate(names)]


def upload_body(sha: str, shard: str = "default", expect: list[str] | None = None, **fields: Any) -> dict[str, Any]:
    """An upload of two passing cells of REPO at ``sha``."""
    body = {"repository": REPO, "sha": sha, "shard": shard, "cells": cells("a/one", "a/two"), **fields}
    return {**body, "expect_shards": expect} if expect else body
