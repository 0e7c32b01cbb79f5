"""Nothing is acknowledged that is not stored, and what is stored is acted on exactly once. GitHub
does not redeliver on its own: a delivery answered 5xx (the database down) must leave nothing that
makes its redelivery look like a duplicate; one answered 202 is in the database before the answer,
whatever the broker does, and a worker acts on it once however often its message comes, and in the
order its pull request's deliveries were stored. The worker's side runs in process here
(``act_on_stored``); ``tests/e2e/test_webhook_intake.py`` has the real processes."""
from __future__ import annotations

import json
import socket
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select, text
from sqlalchemy.exc import OperationalError

from gradci.services.api.app import create_app
from gradci.services.db.models import Delivery
from gradci.services.db.session import engine_for, session_scope
from gradci.services.github.intake import act_on_delivery
from gradci.services.settings import Settings
from tests.support.broker import queued_tasks
from tests.support.payloads import payload
from tests.support.webhook_client import BASE, HEAD, act_on_stored, closed_port, deliver, runs, webhook_headers

pytestmark = pytest.mark.integration


def stored_deliveries(url: str) -> dict[str, Delivery]:
    with session_scope(url, readonly=True) as session:
        return {d.delivery_id: d for d in session.scalars(select(Delivery).order_by(Delivery.id))}


def send_nothing(run_id: int) -> None:
    """In place of sending a plan or a report: what is stored is under test, not what is queued."""


def assert_run_started_once(settings: Settings, redis_url: str) -> None:
    """One run of the head commit and one of its base, each planned exactly once: nothing is left of
    the attempts that failed."""
    stored = runs(settings.database_url)
    assert sorted(run.head_sha for run in stored) == sorted([HEAD, BASE])
    assert {run.status for run in stored} == {"queued"}
    plans = Counter(args[0] for task, args in queued_tasks(redis_url) if task == "gradci.plan_run")
    assert plans == Counter({run.id: 1 for run in stored})


def redeliver_until_handled(settings: Settings, delivery: str) -> None:
    with TestClient(create_app(settings)) as client:
        again = deliver(client, "pull_request", payload("pull_request.opened"), delivery=delivery)
        assert again.status_code == 202, again.text
        once_more = deliver(client, "pull_request", payload("pull_request.opened"), delivery=delivery)
        assert once_more.status_code == 200 and once_more.json()["duplicate"]
    act_on_stored(settings)


@pytest.fixture
def silent_broker() -> Iterator[str]:
    """A Redis URL whose server takes connections and never answers: every send hangs to its timeout."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)
        yield f"redis://127.0.0.1:{listener.getsockname()[1]}/0"


def test_a_broker_that_hangs_delays_no_answer_and_loses_no_delivery(settings, redis_url, silent_broker):
    """The answer waits for the store, not the broker: stored and acknowledged while the message's
    send hangs (the reconciler sends it later), and acted on once."""
    with TestClient(create_app(settings.model_copy(update={"broker_url": silent_broker}))) as client:
        started = time.monotonic()
        answer = deliver(client, "pull_request", payload("pull_request.opened"), delivery="d-broker")
        assert answer.status_code == 202 and time.monotonic() - started < 2.0, answer.text
        assert deliver(client, "pull_request", payload("pull_request.opened"), delivery="d-broker").json()["duplicate"]
    assert stored_deliveries(settings.database_url)["d-broker"].processed_at is None
    assert queued_tasks(redis_url) == []
    act_on_stored(settings)
    assert_run_started_once(settings, redis_url)


def test_a_delivery_while_the_database_is_down_answers_503_and_its_redelivery_runs_once(settings, redis_url):
    database_down = settings.model_copy(
        update={"database_url": f"postgresql+psycopg://postgres@127.0.0.1:{closed_port()}/gradci"})
    with TestClient(create_app(database_down)) as client:
        answer = deliver(client, "pull_request", payload("pull_request.opened"), delivery="d-database")
    assert answer.status_code == 503, answer.text
    assert queued_tasks(redis_url) == []
    redeliver_until_handled(settings, "d-database")
    assert_run_started_once(settings, redis_url)


@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
def test_no_answer_before_the_delivery_is_committed(settings):
    """While the table is locked the delivery cannot be stored, and so no answer comes; it comes,
    202, once the row is in."""
    raw = json.dumps(payload("pull_request.opened")).encode()
    with TestClient(create_app(settings)) as client, ThreadPoolExecutor(1) as pool:
        with engine_for(settings.database_url).connect() as locker:
            locker.execute(text("LOCK TABLE deliveries IN SHARE MODE"))  # INSERTs wait for it
            answer = pool.submit(client.post, "/webhooks/github", content=raw,
                                 headers=webhook_headers("pull_request", raw, delivery="d-locked"))
            time.sleep(1.0)
            assert not answer.done(), "acknowledged before the delivery was stored"
            locker.rollback()
        assert answer.result(timeout=30).status_code == 202
    assert stored_deliveries(settings.database_url)["d-locked"].processed_at is None


@pytest.fixture
def database_fails_on_new_runs(postgres_url: str):
    """PostgreSQL refusing to store a run as a server shutting down does (SQLSTATE 57P01): the
    database goes away in the middle of acting on a delivery, after its first writes."""
    with engine_for(postgres_url).begin() as connection:
        connection.execute(text("""
            CREATE FUNCTION refuse_runs() RETURNS trigger AS $$
            BEGIN RAISE EXCEPTION 'terminating connection due to administrator command' USING ERRCODE = '57P01';
            END $$ LANGUAGE plpgsql"""))
        connection.execute(text("CREATE TRIGGER refuse_runs BEFORE INSERT ON runs EXECUTE FUNCTION refuse_runs()"))

    def recover() -> None:
        with engine_for(postgres_url).begin() as connection:
            connection.execute(text("DROP TRIGGER refuse_runs ON runs"))
            connection.execute(text("DROP FUNCTION refuse_runs()"))

    yield recover
    with engine_for(postgres_url).begin() as connection:
        connection.execute(text("DROP TRIGGER IF EXISTS refuse_runs ON runs"))
        connection.execute(text("DROP FUNCTION IF EXISTS refuse_runs()"))


@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
def test_a_database_failing_while_a_delivery_is_acted_on_leaves_it_to_act_on_again(
        settings, redis_url, database_fails_on_new_runs):
    """Acting on it stores its runs and marks it processed together: a failure midway stores
    neither, and the next attempt (the task's retry, or the reconciler's message) starts the run once."""
    with TestClient(create_app(settings)) as client:
        assert deliver(client, "pull_request", payload("pull_request.opened"), delivery="d-midway").status_code == 202
    with pytest.raises(OperationalError):
        act_on_stored(settings)
    assert stored_deliveries(settings.database_url)["d-midway"].processed_at is None
    assert runs(settings.database_url) == [] and not any(task == "gradci.plan_run"
                                                         for task, _ in queued_tasks(redis_url))
    database_fails_on_new_runs()
    act_on_stored(settings)
    assert_run_started_once(settings, redis_url)


def test_refused_deliveries_are_not_recorded_so_a_redelivery_is_decided_again(settings, redis_url):
    """A 403 acted on nothing: once the repository is allowed, redelivering it starts the run."""
    with TestClient(create_app(settings.model_copy(update={"allowed_repos": ["octo/*"]}))) as client:
        refused = deliver(client, "pull_request", payload("pull_request.opened"), delivery="d-refused")
    assert refused.status_code == 403
    assert stored_deliveries(settings.database_url) == {}
    redeliver_until_handled(settings, "d-refused")
    assert_run_started_once(settings, redis_url)


def deliver_at_once(settings: Settings, deliveries: list[tuple[bytes, dict[str, str]]]) -> list[int]:
    """Each (body, headers) posted from a thread of its own, all together."""
    with TestClient(create_app(settings)) as test_client, ThreadPoolExecutor(len(deliveries)) as pool:
        answers = pool.map(lambda delivery: test_client.post("/webhooks/github", content=delivery[0],
                                                             headers=delivery[1]), deliveries)
        return [answer.status_code for answer in answers]


def test_a_replayed_delivery_is_acted_on_once_even_when_the_copies_arrive_together(settings, redis_url):
    """The same delivery 8 times at once (a replay, or GitHub's redelivery racing the original)."""
    raw = json.dumps(payload("pull_request.opened")).encode()
    statuses = deliver_at_once(settings, [(raw, webhook_headers("pull_request", raw, delivery="d-replayed"))] * 8)
    assert sorted(statuses) == [200] * 7 + [202]
    act_on_stored(settings)
    assert_run_started_once(settings, redis_url)


def test_messages_of_one_delivery_at_once_act_on_it_once(settings):
    """Two workers take messages of the same delivery together: one acts, the other finds it done.
    A push to the default branch, since every delivery of it would start a run of its own."""
    push = payload("push")
    push.update(ref="refs/heads/master", after="c" * 40, deleted=False)
    with TestClient(create_app(settings)) as client:
        assert deliver(client, "push", push, delivery="d-twice").status_code == 202
    stored = stored_deliveries(settings.database_url)["d-twice"].id
    with ThreadPoolExecutor(2) as pool:
        acted = list(pool.map(lambda _: act_on_delivery(settings, stored, plan=send_nothing, publish=send_nothing),
                              range(2)))
    assert sorted(len(outcomes) for outcomes in acted) == [0, 1]
    assert [run.head_sha for run in runs(settings.database_url)] == ["c" * 40]


def test_a_pull_requests_deliveries_are_acted_on_in_the_order_they_were_stored(settings):
    """Messages can come late (a redelivered or resent one): whichever comes first, the opening is
    acted on before the push that supersedes it, and the push's run is the one left running."""
    pushed = payload("pull_request.synchronize")
    pushed["pull_request"]["head"]["sha"], pushed["pull_request"]["base"]["sha"] = "b" * 40, BASE
    with TestClient(create_app(settings)) as client:
        deliver(client, "pull_request", payload("pull_request.opened"), delivery="d-opened")
        deliver(client, "pull_request", pushed, delivery="d-pushed")
    stored = stored_deliveries(settings.database_url)
    late_first = act_on_delivery(settings, stored["d-pushed"].id, plan=send_nothing, publish=send_nothing)
    assert len(late_first) == 2
    assert act_on_delivery(settings, stored["d-opened"].id, plan=send_nothing, publish=send_nothing) == []
    assert {run.head_sha: run.status for run in runs(settings.database_url)} == {
        HEAD: "cancelled", BASE: "queued", "b" * 40: "queued"}


@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
def test_a_delivery_that_cannot_be_stored_is_recorded_and_does_not_hold_up_the_next(settings):
    """A branch name longer than the column: acting on it again would fail again, so it is marked
    processed with the error instead of being retried forever, and the pull request's next delivery
    is acted on all the same."""
    bad = payload("pull_request.opened")
    bad["pull_request"]["head"]["ref"] = "x" * 300
    pushed = payload("pull_request.synchronize")
    pushed["pull_request"]["head"]["sha"], pushed["pull_request"]["base"]["sha"] = "b" * 40, BASE
    with TestClient(create_app(settings)) as client:
        deliver(client, "pull_request", bad, delivery="d-bad")
        deliver(client, "pull_request", pushed, delivery="d-next")
    act_on_stored(settings)
    stored = stored_deliveries(settings.database_url)
    assert "StringDataRightTruncation" in stored["d-bad"].outcome["error"]
    assert stored["d-next"].processed_at is not None and stored["d-next"].run_id is not None
    assert {run.head_sha for run in runs(settings.database_url)} == {"b" * 40, BASE}


def test_pushes_to_one_pull_request_arriving_together_leave_one_active_run_and_one_base_run(settings):
    """8 pushes to pull request 2 at once: whichever is stored last supersedes the others, and the
    base commit, missing for all of them, gets one run."""
    deliveries = []
    for index in range(8):
        body = payload("pull_request.synchronize")
        body["pull_request"]["head"]["sha"] = f"{index:040x}"
        body["pull_request"]["base"]["sha"] = BASE
        raw = json.dumps(body).encode()
        deliveries.append((raw, webhook_headers("pull_request", raw)))
    assert deliver_at_once(settings, deliveries) == [202] * 8
    with ThreadPoolExecutor(4) as pool:  # the messages taken by several workers at once
        list(pool.map(lambda delivery: act_on_delivery(settings, delivery.id, plan=send_nothing, publish=send_nothing),
                      stored_deliveries(settings.database_url).values()))
    stored = runs(settings.database_url)
    assert sorted(run.status for run in stored if run.pr_number == 2) == ["cancelled"] * 7 + ["queued"]
    assert [run.status for run in stored if run.head_sha == BASE] == ["queued"]
    last = max(stored_deliveries(settings.database_url).values(), key=lambda delivery: delivery.id)
    assert [run.head_sha for run in stored if run.status == "queued" and run.pr_number] == [
        last.payload["pull_request"]["head"]["sha"]]
