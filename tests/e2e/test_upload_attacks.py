"""Uploads tried as an attacker would, on the real service (``gradci api`` and a worker on PostgreSQL
and Redis, the fake GitHub, a local OIDC issuer): with a good credential of the repository, or a
credential of another one, to speak for the service, for a fork's untrusted commit, or for a commit
a pull request does not show; and a body big enough to exhaust the API process's memory were it
parsed whole."""
from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import func, select

from gradci._testing.processes import wait_for
from gradci._testing.service import Service
from gradci.services.db.models import GitHubReport, Result, Run, RunStatus, Trigger
from gradci.services.db.results import upsert_results
from gradci.services.db.runs import create_run, get_or_create_repository
from gradci.services.db.session import session_scope
from gradci.services.github.publish import publish_run
from gradci.services.reports.markdown import MARKER
from gradci.services.settings import Settings
from tests.support.fake_github import FakeGitHub, repository_id
from tests.support.fake_oidc import FakeOidcIssuer
from tests.support.uploads import (
    AUDIENCE,
    PUBLIC_URL,
    REPO,
    cells,
    gradci,
    new_token,
    post,
    upload_body,
    upload_service,
)

pytestmark = pytest.mark.integration

STRANGER = "mallory/anything"


@pytest.fixture(scope="module")
def service(postgres_database: str, redis_database: str, github: FakeGitHub, issuer: FakeOidcIssuer,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    """The service with its defaults (a 64 MiB body cap)."""
    with upload_service(postgres_database, redis_database, github, issuer, tmp_path_factory) as running:
        yield running


def service_failed(service: Service, github: FakeGitHub, sha: str, pr: int) -> int:
    """The service's own sandboxed run of ``sha`` (pull request ``pr``), failed, as its worker stores it,
    and its report published to GitHub: ``gradci/project`` is ``failure``."""
    with session_scope(service.database_url) as session:
        repository = get_or_create_repository(session, f"https://github.com/{REPO}.git", REPO)
        run = create_run(session, repository=repository, trigger=Trigger.webhook.value, head_sha=sha, pr_number=pr)
        run.status, run.config = RunStatus.failed.value, {"report": {"project": {"target": 90}}}
        upsert_results(session, run.id, cells("a/one", "a/two", status="fail"))
        session.add(GitHubReport(run_id=run.id, full_name=REPO))
        run_id = run.id
    settings = Settings(database_url=service.database_url, github_token="gh-token", github_api_url=github.url,
                        public_url=PUBLIC_URL)
    assert publish_run(run_id, settings) == "published"
    assert [s["state"] for s in github.statuses_for(sha, "gradci/project")] == ["failure"]
    return run_id


def test_a_forged_upload_leaves_the_services_failure_in_place(service: Service, github: FakeGitHub) -> None:
    sha = "a1" * 20
    github.add_pull_request(REPO, 7, head_sha=sha)
    service_failed(service, github, sha, 7)
    forged = post(service, upload_body(sha, pr=7), new_token(service))  # every cell passes
    assert forged.status_code == 202, forged.text
    wait_for(lambda: github.statuses_for(sha, "gradci/upload/project") and
             github.statuses_for(sha, "gradci/upload/patch"), "the upload's own statuses")
    assert [s["state"] for s in github.statuses_for(sha, "gradci/project")] == ["failure"]
    assert [s["state"] for s in github.statuses_for(sha, "gradci/upload/project")][-1] == "success"
    # One comment, two sections, each from its own run: the service's still says its cells fail.
    wait_for(lambda: "Uploaded by the project's CI" in github.comments_on(REPO, 7)[0]["body"], "the upload's section")
    (comment,) = github.comments_on(REPO, 7)
    body = comment["body"]
    assert body.startswith(MARKER)
    ours, uploaded = body.split("## Uploaded by the project's CI")
    assert "## Checked by gradci" in ours and "project coverage is **0.00%**" in ours
    assert "gradci did not run this code" in uploaded and "project coverage is **100.00%**" in uploaded


def test_an_omitted_pr_does_not_skip_the_fork_rule(service: Service, github: FakeGitHub) -> None:
    sha = "b2" * 20
    # The label is there, but from an earlier push: no labeled webhook was ever stored for this head.
    github.add_pull_request(REPO, 9, fork=True, labels=("gradci:run",), head_sha=sha)
    token = new_token(service)
    before = stored_runs(service)
    for body in (upload_body(sha), upload_body(sha, pr=9)):
        answer = post(service, body, token)
        assert answer.status_code == 403 and "pull request 9 comes from a fork" in answer.json()["detail"], answer.text
    lookups = [call["path"] for call in github.calls if f"/commits/{sha}/pulls" in call["path"]]
    assert lookups == [f"/repos/{REPO}/commits/{sha}/pulls?per_page=100"]
    assert stored_runs(service) == before


def test_a_pr_whose_head_is_another_commit_is_refused(service: Service, github: FakeGitHub) -> None:
    github.add_pull_request(REPO, 11, head_sha="c3" * 20)
    answer = post(service, upload_body("d4" * 20, pr=11), new_token(service))
    assert answer.status_code == 403 and f"pull request 11's head is {'c3' * 20}" in answer.json()["detail"]
    assert github.comments_on(REPO, 11) == []


def test_a_strangers_id_token_gets_nothing(service: Service, github: FakeGitHub, issuer: FakeOidcIssuer) -> None:
    sha = "e5" * 20
    before = stored_runs(service)

    def id_token(**claims: Any) -> str:
        return issuer.mint(issuer.claims(AUDIENCE, sha=sha, **claims))

    refusals = [
        # Any repository the issuer signs for (on GitHub: all of them) has tokens: only registered ones upload.
        (upload_body(sha, repository=STRANGER), id_token(repository=STRANGER), "not in GRADCI_ALLOWED_REPOS"),
        # The name, deleted and taken again by someone else: its id is another.
        (upload_body(sha), id_token(repository_id="1"), "is for repository id 1"),
        # A token minted for one commit uploads no other.
        (upload_body(sha), issuer.mint(issuer.claims(AUDIENCE, sha="f6" * 20)), f"not {sha}"),
        # A pull_request workflow's token (its sha: the merge commit) speaks for its own pull request only.
        (upload_body(sha, pr=12), issuer.mint(issuer.claims(AUDIENCE, sha="f6" * 20, ref="refs/pull/7/merge")),
         f"not {sha}"),
    ]
    github.add_pull_request(REPO, 12, head_sha=sha)
    for body, token, says in refusals:
        answer = post(service, body, token)
        assert answer.status_code == 403 and says in answer.json()["detail"], answer.text
    assert stored_runs(service) == before
    assert post(service, upload_body(sha), id_token()).status_code == 202  # the repository's own, for its commit
    # Registered by its operator (gradci repos add), the same repository's token uploads.
    assert gradci(service, "repos", "add", STRANGER).returncode == 0
    try:
        answer = post(service, upload_body(sha, repository=STRANGER),
                      id_token(repository=STRANGER, repository_id=str(repository_id(STRANGER))))
        assert answer.status_code == 202, answer.text
    finally:
        assert gradci(service, "repos", "remove", STRANGER).returncode == 0


def stored_runs(service: Service) -> int:
    with session_scope(service.database_url, readonly=True) as session:
        return session.scalar(select(func.count()).select_from(Run)) or 0


def rss_kib(pid: int, field: str) -> int:
    """``field`` (VmRSS, VmHWM: the peak) of process ``pid``, in KiB, from /proc."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(f"no {field} for {pid}")


def big_body(sha: str, megabytes: int) -> bytes:
    """An upload of about ``megabytes`` MiB: many ordinary cells."""
    cell = json.dumps(dict(cells("x")[0], scenario="big/0000000"))
    count = megabytes * 2**20 // (len(cell) + 1)
    rows = ",".join(json.dumps(dict(cells("x")[0], scenario=f"big/{index:07d}")) for index in range(count))
    head = json.dumps({"repository": REPO, "sha": sha, "shard": "big"})[:-1]
    return f'{head}, "cells": [{rows}]}}'.encode()


def test_a_60_mib_upload_barely_moves_the_api_process_memory(service: Service) -> None:
    token = new_token(service)
    assert post(service, upload_body("0a" * 20), token).status_code == 202  # the first upload's imports
    body = big_body("1b" * 20, 60)
    assert 58 * 2**20 < len(body) < 64 * 2**20
    pid = service.api.pid
    Path(f"/proc/{pid}/clear_refs").write_text("5")  # the peak starts again from what it holds now
    before = rss_kib(pid, "VmRSS")
    answer = httpx.post(f"{service.url}/api/uploads", content=body, timeout=600,
                        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
    assert answer.status_code == 202, answer.text
    grew_mib = (rss_kib(pid, "VmHWM") - before) / 1024
    print(f"API process: {before / 1024:.1f} MiB before, peak {grew_mib:.1f} MiB more for {len(body) / 2**20:.1f} MiB")
    assert grew_mib < 8
    with session_scope(service.database_url, readonly=True) as session:
        run_id = answer.json()["run_id"]
        stored = session.scalar(select(func.count()).select_from(Result).where(Result.run_id == run_id))
    assert stored == answer.json()["cells"] == body.count(b'"scenario"')
