"""Webhook deliveries on real processes: ``gradci api`` stores and acknowledges, ``gradci worker`` acts
(its control node; private PostgreSQL and Redis, ``tests.support.faults``; heartbeats and the
reconciler's grace shortened). A delivery is acted on exactly once when two messages of it are taken
at once, and when the process acting on it is killed midway; a delivery acknowledged while the broker is down
is acted on by the reconciler once the broker is back. Each run appears, is planned and finishes once.
"""
from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import psycopg
import pytest
from sqlalchemy import select

from gradci._testing.processes import children_map, control_nodes_below, wait_for
from gradci._testing.repos import commit_all
from gradci._testing.service import assert_each_cell_once, jobs_of, results_of
from gradci.services.db.models import Delivery
from gradci.services.db.runs import get_or_create_repository
from gradci.services.db.session import session_scope
from gradci.services.github.intake import base_run_lock, subject_lock
from tests.support import faults
from tests.support.broker import send_task
from tests.support.faults import FaultyService, start_faulty_service
from tests.support.payloads import payload
from tests.support.projects import project_repository
from tests.support.webhook_client import closed_port, webhook_headers

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(faults.available() is not None, reason=str(faults.available()))]

FULL_NAME = "Codertocat/Hello-World"


@pytest.fixture(scope="module")
def mirror(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    """file:// mirror of Codertocat/Hello-World: ``tests/data/projects/intake`` at five commits."""
    root = tmp_path_factory.mktemp("mirrors")
    repo = root / f"{FULL_NAME}.git"
    shas = [project_repository("intake", repo, branch="master")]
    for index in range(1, 5):
        (repo / "NOTES").write_text(f"commit {index}")
        shas.append(commit_all(repo, f"commit {index}"))
    return root, shas


@pytest.fixture(scope="module")
def faulty_webhook_service(mirror: tuple[Path, list[str]]) -> Iterator[FaultyService]:
    """``faulty_service`` (private PostgreSQL and Redis) that takes webhooks and clones from ``mirror``."""
    root, shas = mirror
    with start_faulty_service(root / f"{FULL_NAME}.git", shas[0], github_webhook_secret="webhook-s3cret",
                              clone_url_template=f"file://{root}/{{full_name}}.git",
                              github_api_url=f"http://127.0.0.1:{closed_port()}", cell_timeout_s="60",
                              worker_heartbeat_s="0.5", worker_online_s="3", reconcile_grace_s="3",
                              # Every run full: each delivery's run must have its job to act on, none carried.
                              full_run_repos="*") as running:
        yield running


def deliver(service: FaultyService, event: str, body: dict, delivery: str) -> httpx.Response:
    raw = json.dumps(body).encode()
    return httpx.post(f"{service.url}/webhooks/github", content=raw, timeout=10,
                      headers=webhook_headers(event, raw, delivery=delivery))


def push_to_master(sha: str) -> dict:
    body = payload("push")
    body.update(ref="refs/heads/master", after=sha, deleted=False)
    return body


def stored(service: FaultyService, delivery: str) -> Delivery:
    with session_scope(service.database_url, readonly=True) as session:
        return session.scalars(select(Delivery).where(Delivery.delivery_id == delivery)).one()


def finished_run_of(service: FaultyService, sha: str, appears_within_s: float = 60) -> dict:
    """The one run of ``sha`` (GET /api/runs?sha=), once the worker made it and it finished; planned
    once: its one job and its one cell stored once."""
    wait_for(lambda: httpx.get(f"{service.url}/api/runs", params={"sha": sha}).json()["items"],
             f"a run of {sha[:7]}", timeout_s=appears_within_s)
    (run,) = httpx.get(f"{service.url}/api/runs", params={"sha": sha}).json()["items"]
    assert service.wait_finished(run["id"], timeout_s=120)["status"] == "passed"
    assert len(jobs_of(service.database_url, run["id"])) == 1
    results = results_of(service.database_url, run["id"])
    assert_each_cell_once(results)
    assert len(results) == 1
    return run


@contextmanager
def database(service: FaultyService) -> Iterator[psycopg.Connection]:
    """A connection of the test's own to the service's PostgreSQL, to hold locks the worker waits for."""
    assert service.postgres is not None
    with psycopg.connect(host=service.postgres.host, port=service.postgres.port, user="postgres",
                         dbname="gradci") as connection:
        yield connection


def waiting_for_locks(connection: psycopg.Connection, count: int) -> bool:
    with connection.cursor() as cursor:  # a connection of its own would not see this one's own locks
        cursor.execute("SELECT count(*) FROM pg_locks WHERE NOT granted")
        row = cursor.fetchone()
    return row is not None and row[0] >= count


def send(service: FaultyService, task: str, argument: int) -> None:
    send_task(service.broker_url, task, argument)


def worker_log(service: FaultyService) -> str:
    return service.log("gradci.worker.log")


def pull_request(number: int, head: str, base: str) -> dict:
    opened = payload("pull_request.opened")
    opened["pull_request"]["head"]["sha"], opened["pull_request"]["base"]["sha"] = head, base
    opened["number"] = opened["pull_request"]["number"] = number
    return opened


def test_a_delivery_whose_message_comes_twice_at_once_is_acted_on_once(faulty_webhook_service, mirror):
    """Both pool processes take a message of the same delivery while the test holds its pull
    request's lock: one acts, the other then finds it processed (acting again would have recorded
    "a run of this commit is already in progress" over what it did)."""
    service = faulty_webhook_service
    shas = mirror[1]
    with database(service) as locks, database(service) as probe:
        locks.execute("SELECT pg_advisory_lock(hashtext(%s))", [subject_lock(f"{FULL_NAME}#7")])
        assert deliver(service, "pull_request", pull_request(7, shas[4], shas[3]), "d-twice").status_code == 202
        send(service, "gradci.handle_delivery", stored(service, "d-twice").id)
        wait_for(lambda: waiting_for_locks(probe, 2), "both messages to be acted on at once", timeout_s=30)
        locks.execute("SELECT pg_advisory_unlock_all()")
    head, base = finished_run_of(service, shas[4]), finished_run_of(service, shas[3])
    delivery = stored(service, "d-twice")
    assert delivery.outcome == {"runs": [head["id"], base["id"]], "cancelled": []} and delivery.run_id == head["id"]
    wait_for(lambda: f"delivery {delivery.id}: acted on already" in worker_log(service), "the second message's end")


def test_a_worker_killed_while_acting_on_a_delivery_leaves_it_to_act_on_once(faulty_webhook_service, mirror):
    """The control node's pool process acting on a pull request's opening is killed (SIGKILL) after
    storing its run, before committing: nothing of it is left but the stored delivery, whose message
    comes back to the restarted pool, and the run and its base's run are made, planned and finished once."""
    service = faulty_webhook_service
    root, shas = mirror
    with session_scope(service.database_url) as session:
        repository_id = get_or_create_repository(session, f"file://{root}/{FULL_NAME}.git", FULL_NAME).id
    with database(service) as locks, database(service) as probe:
        locks.execute("SELECT pg_advisory_lock(hashtext(%s))", [base_run_lock(repository_id, shas[0])])
        assert deliver(service, "pull_request", pull_request(5, shas[1], shas[0]), "d-killed").status_code == 202
        wait_for(lambda: waiting_for_locks(probe, 1), "the worker to wait, its run stored but not committed",
                 timeout_s=30)
        assert service.worker is not None
        (control_node,) = control_nodes_below(service.worker.pid)  # where deliveries are acted on
        pool = children_map().get(control_node, [])
        assert pool, "the control node has pool processes"
        for pid in pool:
            os.kill(pid, signal.SIGKILL)
        locks.execute("SELECT pg_advisory_unlock_all()")
    head, base = finished_run_of(service, shas[1]), finished_run_of(service, shas[0])
    assert head["pr_number"] == 5 and base["pr_number"] is None
    assert stored(service, "d-killed").outcome == {"runs": [head["id"], base["id"]], "cancelled": []}
    assert "exited with 'signal 9 (SIGKILL)'" in worker_log(service)


def test_a_delivery_acknowledged_while_the_broker_is_down_is_acted_on_once_it_is_back(faulty_webhook_service, mirror):
    """Redis is down: the delivery is stored and acknowledged at once, its message cannot be sent;
    once Redis is back (empty), the reconciler sends it and the worker acts on it."""
    service = faulty_webhook_service
    sha = mirror[1][2]
    assert service.redis is not None
    service.redis.kill()
    try:
        started = time.monotonic()
        assert deliver(service, "push", push_to_master(sha), "d-no-broker").status_code == 202
        assert time.monotonic() - started < 2.0
        assert stored(service, "d-no-broker").processed_at is None
        wait_for(lambda: "stored but not announced" in service.log("api.log"), "the API to give up the send",
                 timeout_s=30)
    finally:
        service.redis.start()
    # The worker's broker connection comes back on Celery's reconnect backoff (up to 30 s between tries),
    # then the elected worker's reconciler resends: allow for both under a loaded machine.
    finished_run_of(service, sha, appears_within_s=150)
    assert f"delivery {stored(service, 'd-no-broker').id} lost its gradci.handle_delivery message" in worker_log(service)
