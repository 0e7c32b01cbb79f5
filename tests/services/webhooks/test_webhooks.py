"""POST /webhooks/github with the payloads GitHub sends: signatures, deduplication, forks, decisions,
deliveries stored and announced, and what a worker makes of them (acted on here, in process): runs
created and queued. Real PostgreSQL/SQLite and Redis; GitHub itself is not called here."""
from __future__ import annotations

import copy
import time

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from gradci._testing.processes import wait_for
from gradci.scenarios.contract.devices import CPU
from gradci.services.api.app import create_app
from gradci.services.broker.queues import CONTROL_QUEUE
from gradci.services.db.models import Delivery, GitHubReport
from gradci.services.db.session import session_scope
from tests.support.broker import queued_tasks
from tests.support.payloads import payload
from tests.support.webhook_client import BASE, HEAD, act_on_stored, deliver, runs

pytestmark = pytest.mark.integration



def test_ping_and_signature_checks(client):
    assert deliver(client, "ping", payload("ping")).status_code == 200
    assert deliver(client, "ping", payload("ping"), secret="wrong").status_code == 401
    assert deliver(client, "ping", payload("ping"), signed=False).status_code == 401


def test_malformed_json_is_400_and_oversized_is_413(client):
    assert deliver(client, "ping", b"{not json").status_code == 400
    big = b" " * (25 * 1024 * 1024 + 1)
    assert deliver(client, "ping", big).status_code == 413


def test_opened_pr_creates_a_run_and_a_baseline_then_duplicates_start_nothing(client, settings, redis_url):
    start = time.perf_counter()
    answer = deliver(client, "pull_request", payload("pull_request.opened"), delivery="d-1")
    assert answer.status_code == 202 and time.perf_counter() - start < 2.0
    assert answer.json() == {"delivery": "d-1", "accepted": "run_pr", "reason": "pull request opened"}
    assert runs(settings.database_url) == []  # stored: a worker acts on it
    with session_scope(settings.database_url, readonly=True) as session:
        stored = session.scalars(select(Delivery).where(Delivery.delivery_id == "d-1")).one()
    assert stored.processed_at is None and stored.subject == "Codertocat/Hello-World#2"
    # On the control queue: a control node takes it even while every job pool is busy.
    wait_for(lambda: ("gradci.handle_delivery", [stored.id]) in queued_tasks(redis_url, [CONTROL_QUEUE]),
             "its message")
    act_on_stored(settings)
    head_run, base_run = runs(settings.database_url)
    assert (head_run.head_sha, head_run.base_sha, head_run.pr_number) == (HEAD, BASE, 2)
    assert base_run.head_sha == BASE and base_run.pr_number is None
    plans = [(name, args[0]) for name, args in queued_tasks(redis_url, [CPU])]  # planning uses a runner
    assert ("gradci.plan_run", head_run.id) in plans and ("gradci.plan_run", base_run.id) in plans
    assert ("gradci.publish_github", head_run.id) in [(name, args[0])
                                                      for name, args in queued_tasks(redis_url, [CONTROL_QUEUE])]
    again = deliver(client, "pull_request", payload("pull_request.opened"), delivery="d-1")
    assert again.status_code == 200 and again.json()["duplicate"]
    assert act_on_stored(settings) == [] and len(runs(settings.database_url)) == 2
    with session_scope(settings.database_url, readonly=True) as session:
        acted = session.scalars(select(Delivery).where(Delivery.delivery_id == "d-1")).one()
        assert acted.run_id == head_run.id and acted.processed_at is not None
        assert acted.outcome == {"runs": [head_run.id, base_run.id], "cancelled": []}
        assert {r.run_id for r in session.scalars(select(GitHubReport))} == {head_run.id, base_run.id}


def test_new_push_cancels_the_older_run_and_close_cancels(client, settings):
    deliver(client, "pull_request", payload("pull_request.opened"))
    pushed = payload("pull_request.synchronize")
    pushed["pull_request"]["head"]["sha"] = "b" * 40
    pushed["pull_request"]["base"]["sha"] = BASE
    assert deliver(client, "pull_request", pushed).status_code == 202
    act_on_stored(settings)
    by_sha = {r.head_sha: r for r in runs(settings.database_url)}
    assert by_sha[HEAD].status == "cancelled" and by_sha["b" * 40].status == "queued"
    assert by_sha[BASE].status == "queued"  # the base run is not the PR's to cancel
    assert deliver(client, "pull_request", payload("pull_request.closed")).json()["accepted"] == "cancel_pr"
    act_on_stored(settings)
    assert {r.head_sha: r.status for r in runs(settings.database_url)}["b" * 40] == "cancelled"


def test_forks_need_the_approval_label(client, settings):
    fork = payload("pull_request.opened")
    fork["pull_request"]["head"]["repo"]["full_name"] = "mallory/Hello-World"
    assert deliver(client, "pull_request", fork).json()["ignored"].startswith("pull request from a fork")
    deleted = copy.deepcopy(fork)
    deleted["pull_request"]["head"]["repo"] = None
    assert deliver(client, "pull_request", deleted).status_code == 202
    assert act_on_stored(settings) == [] and runs(settings.database_url) == []  # nothing stored to act on
    labeled = payload("pull_request.labeled")
    labeled["pull_request"]["head"]["repo"] = None
    labeled["label"]["name"] = "gradci:run"
    assert deliver(client, "pull_request", labeled).status_code == 202
    act_on_stored(settings)
    assert [r.pr_number for r in runs(settings.database_url) if r.pr_number] == [2]


def test_adding_the_full_label_runs_the_pull_request_again_and_a_forks_waits_for_approval(client, settings):
    """The label that asks for every cell (GRADCI_FULL_RUN_LABEL) is read when the run is planned: adding
    it to a pull request runs its head again; on a fork's, only the approval runs its code."""
    labeled = payload("pull_request.labeled")
    labeled["label"]["name"] = settings.full_run_label
    labeled["pull_request"]["labels"] = [{"name": settings.full_run_label}]
    assert deliver(client, "pull_request", labeled).json()["accepted"] == "run_pr"
    other = copy.deepcopy(labeled)
    other["label"]["name"] = "documentation"
    assert "is not" in deliver(client, "pull_request", other).json()["ignored"]
    fork = copy.deepcopy(labeled)
    fork["pull_request"]["head"]["repo"]["full_name"] = "mallory/Hello-World"
    assert "fork" in deliver(client, "pull_request", fork).json()["ignored"]
    act_on_stored(settings)
    assert [r.pr_number for r in runs(settings.database_url) if r.pr_number] == [2]


def test_unknown_events_are_accepted_and_ignored(client, settings):
    assert deliver(client, "issues", {"action": "opened", "issue": {}}).status_code == 202
    assert deliver(client, "pull_request", {**payload("pull_request.opened"), "action": "edited"}).status_code == 202
    assert act_on_stored(settings) == [] and runs(settings.database_url) == []


def test_repositories_outside_the_allow_list_are_refused(settings):
    with TestClient(create_app(settings.model_copy(update={"allowed_repos": ["octo/*"]}))) as client:
        assert deliver(client, "pull_request", payload("pull_request.opened")).status_code == 403
    assert runs(settings.database_url) == []


def test_push_to_default_branch_starts_a_baseline_and_template_maps_clone_url(settings):
    push = payload("push")
    push.update(ref="refs/heads/master", after="c" * 40, deleted=False)
    template = "file:///srv/mirrors/{full_name}.git"
    with TestClient(create_app(settings.model_copy(update={"clone_url_template": template}))) as client:
        assert deliver(client, "push", push).json()["accepted"] == "baseline"
    act_on_stored(settings)  # the template was the API's: the stored decision carries its clone URL
    (run,) = runs(settings.database_url)
    assert run.head_sha == "c" * 40 and run.trigger == "push"
    assert run.repository.url == "file:///srv/mirrors/Codertocat/Hello-World.git"


def test_null_pr_body_never_crashes(client, settings):
    assert deliver(client, "pull_request", payload("pull_request.opened.null-body")).status_code == 202


@pytest.mark.parametrize(("event", "path", "value"), [
    ("pull_request", ("action",), {"x": 1}),
    ("pull_request", ("number",), {"x": 1}),
    ("pull_request", ("pull_request", "number"), "12"),
    ("pull_request", ("pull_request", "head", "sha"), {"x": 1}),
    ("pull_request", ("pull_request", "base", "sha"), [1]),
    ("pull_request", ("repository", "full_name"), 7),
    ("push", ("after",), {"x": 1}),
    ("push", ("ref",), True),
    ("pull_request", ("pull_request", "head"), "main"),
    ("push", ("repository",), ["acme/kernels"]),
])
def test_signed_payload_fields_of_the_wrong_type_answer_400(client, settings, event, path, value):
    """Signed, so past the signature check: the field's type is what is wrong, and it says which."""
    body = copy.deepcopy(payload("pull_request.opened" if event == "pull_request" else "push"))
    target = body
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    response = deliver(client, event, body)
    assert response.status_code == 400, response.text
    assert ".".join(path) in response.json()["detail"]
    assert runs(settings.database_url) == []
