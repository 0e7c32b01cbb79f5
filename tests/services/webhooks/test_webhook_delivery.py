"""A delivery counts as handled only once what it asked for is stored and queued. GitHub does not
redeliver on its own: a delivery answered 5xx (broker or database down) must leave nothing that makes
its redelivery look like a duplicate, and the redelivery must then start the run exactly once."""
from __future__ import annotations

import json
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select, text

from gradci.services.api.app import create_app
from gradci.services.db.models import Delivery
from gradci.services.db.session import engine_for, session_scope
from gradci.services.settings import Settings
from tests.support.broker import queued_plan_runs
from tests.support.payloads import payload
from tests.support.webhook_client import BASE, HEAD, closed_port, deliver, runs, webhook_headers

pytestmark = pytest.mark.integration



def delivery_ids(url: str) -> list[str]:
    with session_scope(url, readonly=True) as session:
        return list(session.scalars(select(Delivery.delivery_id)))


def assert_run_started_once(settings: Settings, redis_url: str) -> None:
    """One run of the head commit and one of its base, each planned exactly once: nothing is left of
    the attempts that failed."""
    stored = runs(settings.database_url)
    assert sorted(run.head_sha for run in stored) == sorted([HEAD, BASE])
    assert {run.status for run in stored} == {"queued"}
    plans = Counter(args[0] for task, args in queued_plan_runs(redis_url) if task == "gradci.plan_run")
    assert plans == Counter({run.id: 1 for run in stored})


def redeliver_until_handled(settings: Settings, delivery: str) -> None:
    with TestClient(create_app(settings)) as client:
        again = deliver(client, "pull_request", payload("pull_request.opened"), delivery=delivery)
        assert again.status_code == 202, again.text
        once_more = deliver(client, "pull_request", payload("pull_request.opened"), delivery=delivery)
        assert once_more.status_code == 200 and once_more.json()["duplicate"]


def test_a_redelivery_after_a_broker_outage_starts_the_run_once(settings, redis_url):
    broker_down = settings.model_copy(update={"broker_url": f"redis://127.0.0.1:{closed_port()}/0"})
    with TestClient(create_app(broker_down)) as client:
        answer = deliver(client, "pull_request", payload("pull_request.opened"), delivery="d-broker")
    assert answer.status_code == 503, answer.text
    redeliver_until_handled(settings, "d-broker")
    assert_run_started_once(settings, redis_url)
    assert delivery_ids(settings.database_url) == ["d-broker"]


def test_a_delivery_while_the_database_is_down_answers_503_and_its_redelivery_runs_once(settings, redis_url):
    database_down = settings.model_copy(
        update={"database_url": f"postgresql+psycopg://postgres@127.0.0.1:{closed_port()}/gradci"})
    with TestClient(create_app(database_down)) as client:
        answer = deliver(client, "pull_request", payload("pull_request.opened"), delivery="d-database")
    assert answer.status_code == 503, answer.text
    assert queued_plan_runs(redis_url) == []
    redeliver_until_handled(settings, "d-database")
    assert_run_started_once(settings, redis_url)


@pytest.fixture
def database_fails_on_new_runs(postgres_url: str):
    """PostgreSQL refusing to store a run as a server shutting down does (SQLSTATE 57P01): the
    database goes away in the middle of a delivery, after its first writes."""
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
def test_a_database_failing_mid_delivery_stores_nothing_and_the_redelivery_runs_once(
        settings, redis_url, database_fails_on_new_runs):
    with TestClient(create_app(settings)) as client:
        answer = deliver(client, "pull_request", payload("pull_request.opened"), delivery="d-midway")
    assert answer.status_code == 503, answer.text
    assert delivery_ids(settings.database_url) == [] and queued_plan_runs(redis_url) == []
    database_fails_on_new_runs()
    redeliver_until_handled(settings, "d-midway")
    assert_run_started_once(settings, redis_url)


def test_refused_deliveries_are_not_recorded_so_a_redelivery_is_decided_again(settings, redis_url):
    """A 403 acted on nothing: once the repository is allowed, redelivering it starts the run."""
    with TestClient(create_app(settings.model_copy(update={"allowed_repos": ["octo/*"]}))) as client:
        refused = deliver(client, "pull_request", payload("pull_request.opened"), delivery="d-refused")
    assert refused.status_code == 403
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
    assert_run_started_once(settings, redis_url)


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
    stored = runs(settings.database_url)
    assert sorted(run.status for run in stored if run.pr_number == 2) == ["cancelled"] * 7 + ["queued"]
    assert [run.status for run in stored if run.head_sha == BASE] == ["queued"]
