"""Uploads from a project's own CI, below the service processes: the body's schema, upload tokens,
OIDC id tokens against a local issuer over loopback HTTP, the shard store on PostgreSQL and SQLite
(merging, replacing, closing exactly once), and the route's refusals, which store nothing."""
from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from pydantic import ValidationError
from sqlalchemy import func, select, update

from gradci.services.api.app import create_app
from gradci.services.db import jobs as job_store
from gradci.services.db.models import (
    Delivery,
    Repository,
    Result,
    Run,
    ScenarioCatalogEntry,
    Upload,
    UploadShard,
    UploadToken,
    utcnow,
)
from gradci.services.db.runs import get_or_create_repository
from gradci.services.db.session import session_scope
from gradci.services.db.uploads import Commit, UploadRunFinished, close, close_overdue, store_shard
from gradci.services.settings import Settings
from gradci.services.uploads import oidc
from gradci.services.uploads.schema import UploadIn
from gradci.services.uploads.tokens import create_token, find_token, revoke_token, token_hash
from tests.support.cells import synthetic_cell
from tests.support.fake_github import FakeGitHub
from tests.support.fake_oidc import FakeOidcIssuer, new_key

REPO = "octo/uploads"
AUDIENCE = "https://gradci.test"
SHA, OTHER_SHA = "a" * 40, "b" * 40


def cells(first: int, count: int, **fields: Any) -> list[dict[str, Any]]:
    return [synthetic_cell(first + index, backend="torch-rev", **fields) for index in range(count)]


def body(**changes: Any) -> dict[str, Any]:
    return {"repository": REPO, "sha": SHA, "cells": cells(0, 3), **changes}


# --- the schema -----------------------------------------------------------------------------------


def test_an_upload_is_what_gradci_check_writes() -> None:
    upload = UploadIn.model_validate(body(sha="A" * 40, base_sha="C" * 64, pr=3, shard="gpu",
                                          expect_shards=["cpu", "gpu"], report={"patch": {"target": 90}}))
    assert (upload.sha, upload.base_sha) == ("a" * 40, "c" * 64)
    assert upload.cell_rows()[0]["backend"] == "torch-rev" and upload.config() == {"report": {"patch": {"target": 90}}}
    error_cell = {"scenario": "s", "backend": "torch-rev", "device": "cuda:0-vs-cpu", "dtype": "float32",
                  "status": "error", "operator": "", "framework": "", "mode": "", "message": "died\x00"}
    assert UploadIn.model_validate(body(cells=[error_cell])).cells[0].message == "died\ufffd"


@pytest.mark.parametrize(("change", "where", "says"), [
    ({"cells": [dict(synthetic_cell(1), status="great")]}, ("body", "cells", 0, "status"), "'pass'"),
    ({"cells": [dict(synthetic_cell(1), device="tpu:0")]}, ("body", "cells", 0, "device"), "unknown device"),
    ({"cells": [dict(synthetic_cell(1), dtype="int8")]}, ("body", "cells", 0, "dtype"), "'float64'"),
    ({"cells": [dict(synthetic_cell(1), operator="curl")]}, ("body", "cells", 0, "operator"), "'gradient'"),
    ({"cells": [dict(synthetic_cell(1), backend="tpu-rev")]}, ("body", "cells", 0, "backend"), "unknown backend"),
    ({"cells": [dict(synthetic_cell(1), framework="torch")]}, ("body", "cells", 0), "framework 'jax', not 'torch'"),
    ({"cells": [dict(synthetic_cell(1), mode="forward")]}, ("body", "cells", 0), "mode 'reverse', not 'forward'"),
    ({"cells": [{k: v for k, v in synthetic_cell(1).items() if k != "scenario"}]}, ("body", "cells", 0, "scenario"),
     "required"),
    ({"cells": [dict(synthetic_cell(1), scenario="x" * 256)]}, ("body", "cells", 0, "scenario"), "255"),
    ({"cells": [dict(synthetic_cell(1), surprise=1)]}, ("body", "cells", 0, "surprise"), "not permitted"),
    ({"cells": [dict(synthetic_cell(0), operator="")]}, ("body", "cells", 0), "operator '' is not one of"),
    ({"cells": []}, ("body", "cells"), "at least 1"),
    ({"sha": "abc123"}, ("body", "sha"), "pattern"),
    ({"repository": "not a repo"}, ("body", "repository"), "pattern"),
    ({"shard": "x", "expect_shards": ["a", "b"]}, ("body",), "not among expect_shards"),
    ({"report": {"project": {"target": "lots"}}}, ("body", "report"), "percentage"),
])
def test_an_upload_outside_the_schema_names_its_field(change: dict, where: tuple, says: str) -> None:
    from gradci.services.uploads.stream import validation_errors

    with pytest.raises(ValidationError) as raised:
        UploadIn.model_validate(body(**change))
    errors = validation_errors(raised.value)
    assert [tuple(error["loc"]) for error in errors] == [where]
    assert says in errors[0]["msg"]


# --- upload tokens --------------------------------------------------------------------------------


def test_a_token_is_stored_as_its_hash_and_found_until_revoked(sqlite_url: str) -> None:
    with session_scope(sqlite_url) as session:
        row, token = create_token(session, REPO)
        token_id = row.id
    assert len(token) > 40 and token.startswith("gradci_")
    with session_scope(sqlite_url) as session:
        stored = session.get(UploadToken, token_id)
        assert stored.token_hash == token_hash(token) and token not in (stored.prefix, stored.token_hash)
        assert find_token(session, token).id == token_id
        assert find_token(session, token[:-1] + ("A" if token[-1] != "A" else "B")) is None  # same prefix
        revoke_token(session, token_id)
    with session_scope(sqlite_url) as session:
        assert find_token(session, token) is None
    with pytest.raises(ValueError, match="owner/name"), session_scope(sqlite_url) as session:
        create_token(session, "not-a-repository")


# --- OIDC id tokens against a local issuer ----------------------------------------------------------


@pytest.fixture(scope="module")
def issuer() -> Iterator[FakeOidcIssuer]:
    with FakeOidcIssuer(REPO) as fake:
        yield fake


def test_an_id_token_of_the_issuer_is_verified_against_its_published_keys(issuer: FakeOidcIssuer) -> None:
    claims = oidc.Issuer(issuer.url).verify(issuer.mint(issuer.claims(AUDIENCE)), AUDIENCE)
    assert claims["repository"] == REPO
    assert "/.well-known/openid-configuration" in issuer.requests and "/.well-known/jwks" in issuer.requests


@pytest.mark.parametrize(("token", "says"), [
    (lambda fake: fake.mint(fake.claims(AUDIENCE), key=new_key()), "Signature verification failed"),
    (lambda fake: fake.mint(fake.claims("https://another.server")), "Audience doesn't match"),
    (lambda fake: fake.mint(fake.claims(AUDIENCE, exp=1_000_000, iat=999_000)), "expired"),
    (lambda fake: fake.mint(fake.claims(AUDIENCE, iss="https://token.actions.githubusercontent.com")), "issuer"),
    (lambda fake: fake.mint({k: v for k, v in fake.claims(AUDIENCE).items() if k != "repository"}), "repository"),
    (lambda fake: fake.mint(fake.claims(AUDIENCE), kid="unknown-key"), "Unable to find a signing key"),
    (lambda fake: "not.a.jwt", "id token"),
], ids=["another key", "another audience", "expired", "another issuer", "no repository", "unknown key", "not a JWT"])
def test_an_id_token_is_refused(issuer: FakeOidcIssuer, token, says: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(oidc.IdTokenRefused, match=says):
        oidc.Issuer(issuer.url).verify(token(issuer), AUDIENCE)


def test_an_issuer_in_the_clear_is_trusted_on_loopback_only() -> None:
    assert oidc.secure_url("https://token.actions.githubusercontent.com") and oidc.secure_url("http://[::1]:8080")
    assert oidc.secure_url("http://localhost:1") and not oidc.secure_url("http://issuer.example")
    with pytest.raises(oidc.IssuerUnavailable, match="https"):
        oidc.Issuer("http://issuer.example")
    with pytest.raises(oidc.IssuerUnavailable, match="cannot read"):
        oidc.Issuer("http://127.0.0.1:9").keys()


def test_the_issuer_of_the_discovery_document_must_be_the_configured_one(issuer: FakeOidcIssuer) -> None:
    other_spelling = issuer.url.replace("127.0.0.1", "localhost")
    with pytest.raises(oidc.IssuerUnavailable, match="names issuer"):
        oidc.Issuer(other_spelling).keys()


# --- storing shards, on PostgreSQL and SQLite -------------------------------------------------------


def store(url: str, shard: str, rows: list[dict[str, Any]], expect: tuple[str, ...] = ("a", "b"),
          sha: str = SHA, wait_s: float = 600) -> Any:
    with session_scope(url) as session:
        repository = get_or_create_repository(session, f"https://github.com/{REPO}.git", REPO)
        return store_shard(session, repository, Commit(sha=sha), shard, expect, rows, wait_s)


def stored_scenarios(url: str, run_id: int) -> list[str]:
    with session_scope(url, readonly=True) as session:
        return sorted(session.scalars(select(Result.scenario).where(Result.run_id == run_id)))


def test_shards_of_one_commit_merge_into_one_run_and_an_upload_again_replaces_its_cells(database_url: str) -> None:
    first = store(database_url, "a", cells(0, 4))
    assert (first.created, first.closed, first.arrived, first.expected) == (True, False, ["a"], ["a", "b"])
    again = store(database_url, "a", cells(10, 2))
    assert (again.run_id, again.created, again.closed) == (first.run_id, False, False)
    assert stored_scenarios(database_url, first.run_id) == ["scenario_00010", "scenario_00011"]
    last = store(database_url, "b", cells(20, 3))
    assert (last.run_id, last.closed, last.arrived) == (first.run_id, True, ["a", "b"])
    assert stored_scenarios(database_url, first.run_id) == [
        "scenario_00010", "scenario_00011", "scenario_00020", "scenario_00021", "scenario_00022"]
    with pytest.raises(UploadRunFinished):
        store(database_url, "b", cells(30, 1))
    with session_scope(database_url, readonly=True) as session:
        run = session.get(Run, first.run_id)
        assert (run.trigger, run.status, run.head_sha) == ("upload", "running", SHA)
        assert session.scalar(select(func.count()).select_from(Run)) == 1
        assert session.scalar(select(func.count()).select_from(Result)) == 5


def test_without_expected_shards_the_first_upload_is_the_whole_run(database_url: str) -> None:
    assert store(database_url, "default", cells(0, 2), expect=()).closed


def test_an_upload_run_closes_once_and_finishes_only_once_closed(database_url: str) -> None:
    run_id = store(database_url, "a", cells(0, 2)).run_id
    with session_scope(database_url) as session:
        assert job_store.finish_run(session, run_id) is None  # open: shards still awaited
    with session_scope(database_url) as session:
        assert close(session, run_id)
    with session_scope(database_url) as session:
        assert not close(session, run_id)  # a second closer, the sweeper or another shard, loses
    with session_scope(database_url) as session:
        run = job_store.finish_run(session, run_id)
        assert run is not None and run.status == "error"  # b never came
        assert "shard(s) b not uploaded" in run.error_message


def test_an_overdue_upload_run_is_closed_by_one_sweep(database_url: str) -> None:
    run_id = store(database_url, "a", cells(0, 2)).run_id
    with session_scope(database_url) as session:
        assert close_overdue(session, limit=10) == []  # its wait is not over
        deadline = session.get(Upload, run_id).deadline
        assert timedelta(seconds=599) < deadline - session.get(Upload, run_id).first_upload_at <= timedelta(seconds=600)
        session.execute(update(Upload).values(deadline=utcnow() - timedelta(seconds=1)))
    with session_scope(database_url) as session:
        assert close_overdue(session, limit=10) == [run_id]
    with session_scope(database_url) as session:
        assert close_overdue(session, limit=10) == []
    with pytest.raises(UploadRunFinished):
        store(database_url, "b", cells(5, 1))


def test_the_last_shards_arriving_at_once_close_each_run_exactly_once(database_url: str) -> None:
    """Two shards of each commit stored at the same moment by two threads (two API processes'
    transactions), and the sweeper racing them: one closer per run, whoever it is."""
    commits = [f"{index:040x}" for index in range(1, 7)]
    closers: dict[str, list[str]] = {sha: [] for sha in commits}
    lock = threading.Lock()

    def upload(sha: str, shard: str, barrier: threading.Barrier) -> None:
        barrier.wait()
        if store(database_url, shard, cells(0 if shard == "a" else 50, 3), sha=sha, wait_s=0.001).closed:
            with lock:
                closers[sha].append(shard)

    def sweep(barrier: threading.Barrier) -> None:
        barrier.wait()
        with session_scope(database_url) as session:
            for run_id in close_overdue(session, limit=100):
                with lock:
                    sha = session.get(Run, run_id).head_sha
                    closers[sha].append("sweeper")

    with ThreadPoolExecutor(max_workers=3) as pool:
        for sha in commits:
            barrier = threading.Barrier(3)
            futures = [pool.submit(upload, sha, "a", barrier), pool.submit(upload, sha, "b", barrier),
                       pool.submit(sweep, barrier)]
            for future in futures:
                future.result()
    with session_scope(database_url, readonly=True) as session:
        assert session.scalar(select(func.count()).select_from(Run)) == len(commits)
    assert {sha: len(names) for sha, names in closers.items()} == dict.fromkeys(commits, 1), closers


# --- the route's refusals store nothing ---------------------------------------------------------------


@pytest.fixture
def github() -> Iterator[FakeGitHub]:
    with FakeGitHub() as fake:
        yield fake


@pytest.fixture
def upload_client(clean_environment, sqlite_url: str, tmp_path: Path, issuer: FakeOidcIssuer,
                  github: FakeGitHub) -> Iterator[TestClient]:
    settings = Settings(database_url=sqlite_url, broker_url="memory://", workdir=tmp_path / "work",
                        upload_max_bytes=200_000, oidc_issuer=issuer.url, oidc_audience=AUDIENCE,
                        github_api_url=github.url)
    with TestClient(create_app(settings)) as client:
        yield client


def token_for(url: str, full_name: str = REPO, revoked: bool = False) -> str:
    with session_scope(url) as session:
        row, token = create_token(session, full_name)
        if revoked:
            revoke_token(session, row.id)
    return token


def stored_rows(url: str) -> dict[str, int]:
    with session_scope(url, readonly=True) as session:
        return {model.__tablename__: session.scalar(select(func.count()).select_from(model))
                for model in (Repository, Run, Result, Upload, UploadShard, ScenarioCatalogEntry)}


def test_refused_uploads_store_nothing(upload_client: TestClient, sqlite_url: str, issuer: FakeOidcIssuer,
                                       github: FakeGitHub) -> None:
    token = token_for(sqlite_url)
    refusals = {
        "no credential": ({}, body(), 401),
        "unknown token": ({"Authorization": "Bearer gradci_" + "x" * 43}, body(), 401),
        "revoked token": ({"Authorization": f"Bearer {token_for(sqlite_url, revoked=True)}"}, body(), 401),
        "another repository's token": ({"Authorization": f"Bearer {token_for(sqlite_url, 'octo/other')}"}, body(),
                                       403),
        "id token by another key": ({"Authorization": f"Bearer {issuer.mint(issuer.claims(AUDIENCE), new_key())}"},
                                    body(), 401),
        "id token of another audience": ({"Authorization": f"Bearer {issuer.mint(issuer.claims('x'))}"}, body(), 401),
        "id token of another repository": (
            {"Authorization": f"Bearer {issuer.mint(issuer.claims(AUDIENCE, repository='octo/other'))}"}, body(), 403),
        "a fork's pull request": ({"Authorization": f"Bearer {token}"}, body(pr=9), 403),
        "an unknown pull request": ({"Authorization": f"Bearer {token}"}, body(pr=10), 403),
        "a cell the engine never makes": ({"Authorization": f"Bearer {token}"},
                                          body(cells=[*cells(0, 2), dict(synthetic_cell(3), dtype="int8")]), 422),
    }
    github.add_pull_request(REPO, 9, fork=True)
    for name, (headers, payload, status) in refusals.items():
        response = upload_client.post("/api/uploads", json=payload, headers=headers)
        assert response.status_code == status, (name, response.text)
    assert upload_client.post("/api/uploads", content=b"{not json", headers={
        "Authorization": f"Bearer {token}"}).json()["detail"][0]["loc"] == ["body"]
    assert stored_rows(sqlite_url) == dict.fromkeys(stored_rows(sqlite_url), 0)


def test_what_would_be_built_big_is_refused_before_it_is(upload_client: TestClient, sqlite_url: str) -> None:
    """The body is streamed: no value, scenario or cell over 64 KiB is built, nor a header of more
    than 10,000 values; each is a 422 that stores nothing."""
    headers = {"Authorization": f"Bearer {token_for(sqlite_url)}"}
    huge = "x" * 150_000
    refusals = {
        "a string": (body(branch=huge), "a single value in the body is over"),
        "a cell": (body(cells=[dict(cells(0, 1)[0], **{f"k{i}": i for i in range(12_000)})]), "cells.0: an item over"),
        "a header": (body(report={f"t{i}": i for i in range(10_001)}), "hold over 10000 values"),
        "cells not a list": (body(cells={"a": 1}), "cells: Input should be a valid list"),
        "no cells": (body(cells=[]), "cells: List should have at least 1 item"),
    }
    for name, (payload, says) in refusals.items():
        answer = upload_client.post("/api/uploads", json=payload, headers=headers)
        assert answer.status_code == 422, (name, answer.text)
        detail = "; ".join(".".join(map(str, e["loc"][1:])) + ": " + e["msg"] for e in answer.json()["detail"])
        assert says in detail, (name, detail)
    assert stored_rows(sqlite_url) == dict.fromkeys(stored_rows(sqlite_url), 0)


def test_a_body_over_the_limit_is_refused_before_it_is_read_whole(upload_client: TestClient, sqlite_url: str) -> None:
    headers = {"Authorization": f"Bearer {token_for(sqlite_url)}"}
    read: list[int] = []

    def chunks() -> Iterator[bytes]:  # no Content-Length: the limit is found as the body streams in
        for index in range(100):
            read.append(index)
            yield b" " * 10_000

    assert upload_client.post("/api/uploads", content=b" " * 200_001, headers=headers).status_code == 413
    assert upload_client.post("/api/uploads", content=chunks(), headers=headers).status_code == 413
    assert stored_rows(sqlite_url)["runs"] == 0


def approved(url: str, pr_number: int, head_sha: str) -> None:
    """A maintainer's ``gradci:run`` on the pull request while ``head_sha`` was its head, as its
    ``labeled`` webhook is stored."""
    with session_scope(url) as session:
        session.add(Delivery(delivery_id=f"labeled-{pr_number}-{head_sha}", event="pull_request", action="labeled",
                             payload={}, subject=f"{REPO}#{pr_number}", processed_at=utcnow(),
                             decision={"kind": "run_pr", "full_name": REPO, "pr_number": pr_number,
                                       "head_sha": head_sha}))


def test_the_fork_rule_of_webhooks_holds_for_uploads(upload_client: TestClient, sqlite_url: str,
                                                     github: FakeGitHub) -> None:
    headers = {"Authorization": f"Bearer {token_for(sqlite_url)}"}
    github.add_pull_request(REPO, 4, fork=True, labels=("gradci:run",), head_sha=SHA)
    github.add_pull_request(REPO, 5, head_sha=OTHER_SHA)
    # The label was added for an earlier head: it approves nothing pushed since.
    approved(sqlite_url, 4, "c" * 40)
    earlier = upload_client.post("/api/uploads", json=body(pr=4), headers=headers)
    assert earlier.status_code == 403 and "comes from a fork" in earlier.json()["detail"]
    approved(sqlite_url, 4, SHA)
    assert upload_client.post("/api/uploads", json=body(pr=4), headers=headers).status_code == 202
    assert upload_client.post("/api/uploads", json=body(pr=5, sha=OTHER_SHA), headers=headers).status_code == 202
    late = upload_client.post("/api/uploads", json=body(pr=4), headers=headers)
    assert late.status_code == 409 and "has closed" in late.json()["detail"]
