"""Results uploaded from a project's own CI, end to end: ``gradci check --upload`` as a CI job runs it
(GitHub Actions' variables and event file, an upload token or the runner's OIDC id token) → ``gradci
api`` on PostgreSQL → one run per commit → ``finalize_run`` on a real worker (Redis) → commit statuses
and one comment on a fake GitHub. The id tokens come from a local OIDC issuer on loopback that
serves its keys; upload tokens from ``gradci tokens create``."""
from __future__ import annotations

import json
import os
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import func, select, update

from gradci._testing.processes import free_port, stop, wait_for
from gradci._testing.service import Service, api_answers, results_of, start_api
from gradci.services.db.models import Repository, Result, Run, Upload, UploadShard, utcnow
from gradci.services.db.session import session_scope
from gradci.services.reports.markdown import MARKER
from tests.support.fake_github import FakeGitHub
from tests.support.fake_oidc import REQUEST_TOKEN, FakeOidcIssuer, new_key
from tests.support.uploads import AUDIENCE, REPO, cells, gradci, new_token, post, upload_body, upload_service

pytestmark = pytest.mark.integration

MAX_BYTES = 1_000_000
HEAD, BASE, MERGE = "1" * 40, "2" * 40, "3" * 40
CHECK = ["--backends", "torch-rev", "--dtypes", "float64", "--devices", "cpu", "-j", "1"]


@pytest.fixture(scope="module", name="upload_service")
def upload_service_fixture(postgres_database: str, redis_database: str, github: FakeGitHub, issuer: FakeOidcIssuer,
                           tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    with upload_service(postgres_database, redis_database, github, issuer, tmp_path_factory,
                        upload_max_bytes=str(MAX_BYTES)) as service:
        yield service


def run_of(service: Service, sha: str) -> dict[str, Any] | None:
    runs = httpx.get(f"{service.url}/api/runs", params={"sha": sha}, timeout=10).json()["items"]
    assert len(runs) <= 1, "uploads of one commit make one run"
    return runs[0] if runs else None


def final_statuses(github: FakeGitHub, sha: str) -> list[dict[str, Any]]:
    return [status for status in github.statuses_for(sha) if status["state"] != "pending"]


def ci_env(tmp_path: Path, **credentials: str) -> dict[str, str]:
    """A GitHub Actions job of pull request 7 (head HEAD, base BASE; GITHUB_SHA its merge commit)."""
    event = tmp_path / "event.json"
    event.write_text(json.dumps({"pull_request": {"number": 7, "head": {"sha": HEAD, "ref": "feature"},
                                                  "base": {"sha": BASE, "ref": "main"}}}))
    env = {key: value for key, value in os.environ.items() if not key.startswith(("GRADCI_", "GITHUB_", "ACTIONS_"))}
    return {**env, "GITHUB_ACTIONS": "true", "GITHUB_REPOSITORY": REPO, "GITHUB_SHA": MERGE,
            "GITHUB_REF": "refs/pull/7/merge", "GITHUB_EVENT_PATH": str(event), **credentials}


def test_two_shards_checked_by_gradci_check_make_one_run_reported_once(
        upload_service: Service, github: FakeGitHub, issuer: FakeOidcIssuer, checks_project: tuple[Path, str],
        tmp_path: Path) -> None:
    token = new_token(upload_service)
    # The base commit's run, uploaded from a push to main: one of its two cells fails.
    base = post(upload_service, upload_body(BASE, branch="main", cells=[*cells("ok/poly"), *cells(
        "ok/trig", status="fail")]), token)
    assert base.status_code == 202 and base.json()["finishing"], base.text
    base_run = upload_service.wait_finished(base.json()["run_id"])
    assert (base_run["trigger"], base_run["status"]) == ("upload", "failed")
    github.add_pull_request(REPO, 7, head_sha=HEAD)
    issuer.sha, issuer.ref = MERGE, "refs/pull/7/merge"  # the id token of a pull_request workflow

    # Shard cpu, first with a wrong cell, then again from gradci check with the runner's id token.
    first = post(upload_service, upload_body(HEAD, "cpu", ["cpu", "gpu"], pr=7, base_sha=BASE,
                                             cells=cells("ok/poly", "stale/cell", status="fail")), token)
    assert first.status_code == 202 and not first.json()["finishing"], first.text
    project = str(checks_project[0])
    with_id_token = ci_env(tmp_path, ACTIONS_ID_TOKEN_REQUEST_URL=issuer.token_request_url,
                           ACTIONS_ID_TOKEN_REQUEST_TOKEN=REQUEST_TOKEN, GRADCI_OIDC_AUDIENCE=AUDIENCE)
    cpu = gradci(upload_service, "check", "--repo", project, "-k", "ok/poly", *CHECK, "--upload", upload_service.url,
                 "--shard", "cpu", "--expect-shards", "cpu,gpu", env=with_id_token, cwd=tmp_path)
    assert cpu.returncode == 0, cpu.stdout + cpu.stderr
    assert "waiting for gpu" in cpu.stderr
    run_id = first.json()["run_id"]
    assert sorted(r.scenario for r in results_of(upload_service.database_url, run_id)) == ["ok/poly"]
    assert final_statuses(github, HEAD) == []

    # Shard gpu, with an upload token: the run closes and its report goes out once.
    gpu = gradci(upload_service, "check", "--repo", project, "-k", "ok/trig", *CHECK, "--upload", upload_service.url,
                 "--shard", "gpu", "--expect-shards", "cpu,gpu", env=ci_env(tmp_path, GRADCI_UPLOAD_TOKEN=token),
                 cwd=tmp_path)
    assert gpu.returncode == 0, gpu.stdout + gpu.stderr
    assert f"to run {run_id}: its report is on its way" in gpu.stderr
    run = upload_service.wait_finished(run_id)
    assert (run["trigger"], run["status"], run["head_sha"], run["base_sha"], run["pr_number"], run["ref"]) == (
        "upload", "passed", HEAD, BASE, 7, "feature")
    assert sorted(r.scenario for r in results_of(upload_service.database_url, run_id)) == ["ok/poly", "ok/trig"]
    wait_for(lambda: len(final_statuses(github, HEAD)) == 2 and github.comments_on(REPO, 7), "the report on GitHub")
    report = httpx.get(f"{upload_service.url}/api/runs/{run_id}/report", timeout=10).json()
    assert report["base_run_id"] == base_run["id"] and [f["scenario"] for f in report["fixes"]] == ["ok/trig"]

    # A shard uploaded after the run finished is refused; nothing was published twice.
    late = gradci(upload_service, "check", "--repo", project, "-k", "ok/trig", *CHECK, "--upload", upload_service.url,
                  "--shard", "gpu", "--expect-shards", "cpu,gpu", env=ci_env(tmp_path, GRADCI_UPLOAD_TOKEN=token),
                  cwd=tmp_path)
    assert late.returncode == 2 and "HTTP 409" in late.stderr and "has closed" in late.stderr
    patch_status, project_status = sorted(final_statuses(github, HEAD), key=lambda s: s["context"])
    assert (project_status["context"], project_status["state"]) == ("gradci/upload/project", "success")
    assert f"compared to {BASE[:7]}" in project_status["description"]
    assert patch_status["context"] == "gradci/upload/patch"
    (comment,) = github.comments_on(REPO, 7)
    assert comment["body"].startswith(MARKER) and "**Fixes** (1)" in comment["body"]
    comment_writes = [c for c in github.calls if "/comments" in c["path"] and c["method"] in ("POST", "PATCH")]
    assert [c["method"] for c in comment_writes] == ["POST"]
    assert len([s for s in github.statuses_for(HEAD)]) == 2  # no pending phase here: it finished within seconds


def test_last_shards_at_once_on_two_api_processes_finish_each_run_once(upload_service: Service,
                                                                        github: FakeGitHub) -> None:
    """The last two shards of each commit arrive at the same moment, one on each of two API processes
    over one PostgreSQL: each run closes once, so its report goes out once."""
    token = new_token(upload_service)
    port = free_port()
    second = start_api(upload_service.env, upload_service.logs, port)
    try:
        wait_for(lambda: api_answers(f"http://127.0.0.1:{port}"), "a second API process", timeout_s=60)
        commits = [f"{index:040x}" for index in range(0x100, 0x106)]
        for sha in commits:
            barrier = threading.Barrier(2)
            answers: list[httpx.Response] = []

            def send(url: str, shard: str, sha: str = sha, barrier: threading.Barrier = barrier) -> None:
                barrier.wait()
                body = upload_body(sha, shard, ["x", "y"], cells=cells(f"{shard}/one", f"{shard}/two"))
                answers.append(httpx.post(f"{url}/api/uploads", json=body, timeout=60,
                                          headers={"Authorization": f"Bearer {token}"}))

            threads = [threading.Thread(target=send, args=(url, shard)) for url, shard in
                       ((upload_service.url, "x"), (f"http://127.0.0.1:{port}", "y"))]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            assert sorted(a.status_code for a in answers) == [202, 202], [a.text for a in answers]
            assert sorted(a.json()["finishing"] for a in answers) == [False, True]
        for sha in commits:
            run = wait_for(lambda sha=sha: (r := run_of(upload_service, sha)) and r["status"] == "passed" and r,
                           f"the run of {sha[:7]}")
            assert run["counts"]["pass"] == 4
        wait_for(lambda: all(final_statuses(github, sha) for sha in commits), "every run's status")
        assert {sha: len(github.statuses_for(sha)) for sha in commits} == dict.fromkeys(commits, 1)
    finally:
        stop(second)


def stored_rows(database_url: str) -> dict[str, int]:
    with session_scope(database_url, readonly=True) as session:
        return {model.__tablename__: session.scalar(select(func.count()).select_from(model))
                for model in (Repository, Run, Result, Upload, UploadShard)}


def declared_size_answer(service: Service, token: str, size: int) -> bytes:
    """The answer to a request declaring ``size`` bytes of body and sending none of them."""
    host, port = service.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as connection:
        connection.sendall(f"POST /api/uploads HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {token}\r\n"
                           f"Content-Type: application/json\r\nContent-Length: {size}\r\n\r\n".encode())
        return connection.recv(4096)


def test_refused_uploads_store_nothing(upload_service: Service, issuer: FakeOidcIssuer, github: FakeGitHub) -> None:
    token, other, revoked = new_token(upload_service), new_token(upload_service, "octo/other"), \
        new_token(upload_service, revoked=True)
    before = stored_rows(upload_service.database_url)
    sha, fork_head = "4" * 40, "8" * 40

    def id_token(key: Any = None, **claims: Any) -> str:
        return issuer.mint(issuer.claims(claims.pop("aud", AUDIENCE), **claims), key)

    refusals = [
        (upload_body(sha), other, 403, "is for octo/other, not octo/uploads"),
        (upload_body(sha), "gradci_" + "0" * 43, 401, "unknown or revoked upload token"),
        (upload_body(sha), revoked, 401, "unknown or revoked upload token"),
        (upload_body(sha), None, 401, "Authorization: Bearer"),
        (upload_body(sha), id_token(new_key()), 401, "Signature verification failed"),
        (upload_body(sha), id_token(aud="https://another.server"), 401, "Audience doesn't match"),
        (upload_body(sha), id_token(exp=1_000_000, iat=999_000), 401, "expired"),
        (upload_body(sha), id_token(repository="octo/other"), 403, "is for octo/other"),
        (upload_body(fork_head, pr=8), token, 403, "comes from a fork"),
        (upload_body(sha, cells=[*cells("a/one"), dict(cells("a/two")[0], status="great")]), token, 422, "cells.1.status"),
        (upload_body(sha, cells=[{k: v for k, v in cells("a/one")[0].items() if k != "device"}]), token, 422,
         "cells.0.device"),
        (b'{"repository": "octo/uploads", "sha": ', token, 422, "malformed JSON"),
        (b" " * (MAX_BYTES + 1), token, 413, "payload larger than"),
    ]
    github.add_pull_request(REPO, 8, fork=True, head_sha=fork_head)
    for body, credential, status, says in refusals:
        answer = post(upload_service, body, credential)
        assert answer.status_code == status, (says, answer.text)
        detail = answer.json()["detail"]
        text = detail if isinstance(detail, str) else "; ".join(
            ".".join(map(str, item["loc"][1:])) + ": " + item["msg"] for item in detail)
        assert says in text, (says, answer.text)
    # Declared too large: answered before the body is sent; streamed too large: as soon as it passes the limit.
    assert declared_size_answer(upload_service, token, 50 * MAX_BYTES).startswith(b"HTTP/1.1 413")
    streamed = httpx.post(f"{upload_service.url}/api/uploads", timeout=60, headers={"Authorization": f"Bearer {token}"},
                          content=(b" " * 65536 for _ in range(200)))
    assert streamed.status_code == 413
    assert stored_rows(upload_service.database_url) == before
    assert run_of(upload_service, sha) is None


def test_a_run_missing_a_shard_finishes_once_its_wait_is_over(upload_service: Service, github: FakeGitHub) -> None:
    token = new_token(upload_service)
    sha = "5" * 40
    first = post(upload_service, upload_body(sha, "cpu", ["cpu", "gpu"]), token)
    assert first.status_code == 202 and not first.json()["finishing"]
    run_id = first.json()["run_id"]
    with session_scope(upload_service.database_url) as session:  # as if GRADCI_UPLOAD_WAIT had passed
        session.execute(update(Upload).where(Upload.run_id == run_id).values(deadline=utcnow()))
    run = upload_service.wait_finished(run_id, timeout_s=60)  # the elected worker's next sweep
    assert run["status"] == "error" and "shard(s) gpu not uploaded" in run["error_message"]
    assert run["counts"]["pass"] == 2
    wait_for(lambda: final_statuses(github, sha), "the run's status on GitHub")
    (status,) = github.statuses_for(sha)
    assert status["state"] == "error" and "gpu not uploaded" in status["description"]
    assert post(upload_service, upload_body(sha, "gpu", ["cpu", "gpu"]), token).status_code == 409
