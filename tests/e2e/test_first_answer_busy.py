"""A pull request's first answer while every CPU worker runs jobs (issue 32 item 3), end to end: App
mode, PostgreSQL, Redis, one real ``gradci worker --concurrency 1``, the fake GitHub.

A push whose jobs sleep keeps the worker's one pool process busy, a second job of it queued behind;
a pull request opened meanwhile gets its in-progress check run while that job still runs and before
its own run is planned. A ``handle_delivery`` an older API sent to the ``cpu`` queue (before the
control queue existed) is still acted on.
"""
from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import select

from gradci._testing.processes import wait_for
from gradci._testing.repos import commit_all, init_repository
from gradci._testing.service import Service
from gradci.scenarios.contract.devices import CPU
from gradci.services.broker.queues import HANDLE_DELIVERY
from gradci.services.db.models import Job, Run
from gradci.services.db.session import session_scope
from gradci.services.github.intake import receive
from gradci.services.settings import Settings
from tests.support import webhook_client
from tests.support.app_service import INSTALLATION
from tests.support.broker import send_task
from tests.support.checkouts import gradci_toml
from tests.support.fake_github import FakeGitHub
from tests.support.payloads import payload, pull_request

pytestmark = pytest.mark.integration

FAST = '''import numpy as np
from gradci import Scenario, namespace


def poly(x):
    return namespace(x).sum(x ** 3 - 2 * x)


def scenarios():
    return [Scenario("a/ok", "gradient", poly, np.array([0.3, -0.2, 0.7]) * {scale})]
'''
# Two jobs (a job per scenario) of about 20 s each: a cell calls its function twice.
SLEEPING = '''import time

import numpy as np
from gradci import Scenario, namespace


def slow(x):
    time.sleep(10)
    return namespace(x).sum(x ** 2)


def scenarios():
    x = np.array([0.3, -0.2, 0.7])
    return [Scenario(f"slow/{i}", "gradient", slow, x, reference=2 * x) for i in range(2)]
'''


@pytest.fixture(scope="module")
def mirror(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    """The mirrors' root, and the commits: a sleeping default branch, a pull request's head onto it, and
    the legacy delivery's pull request (head and base of its own: no run of the others' commits)."""
    root = tmp_path_factory.mktemp("mirrors")
    repo = init_repository(root / "Codertocat" / "Hello-World.git", "master")
    (repo / "gradci.toml").write_text(gradci_toml("grad_scenarios", backends=["torch-rev"], dtypes=["float64"]))
    shas = {}
    for name, source in (("sleeping", SLEEPING), ("pull", FAST.format(scale=2)), ("legacy_base", FAST.format(scale=3)),
                         ("legacy", FAST.format(scale=4))):
        (repo / "grad_scenarios.py").write_text(source)
        shas[name] = commit_all(repo, name)
    return root, shas


@pytest.fixture(scope="module")
def service(one_process_service: Service) -> Service:
    return one_process_service


def with_installation(body: dict) -> dict:
    return {**body, "installation": {"id": INSTALLATION}}


def in_progress_check_run(fake: FakeGitHub, sha: str) -> dict | None:
    return next((call for call in fake.calls if call["method"] == "POST" and call["path"].endswith("/check-runs")
                 and (call["body"] or {}).get("head_sha") == sha), None)


def jobs_by_status(database_url: str, sha: str) -> list[str]:
    with session_scope(database_url, readonly=True) as session:
        return sorted(session.scalars(select(Job.status).join(Run, Run.id == Job.run_id).where(Run.head_sha == sha)))


def service_settings(service: Service) -> Settings:
    """The settings the service's processes run with (their GRADCI_* variables)."""
    return Settings(**{key.removeprefix("GRADCI_").lower(): value for key, value in service.env.items()
                       if key.startswith("GRADCI_")})


def test_a_delivery_an_older_api_sent_to_the_cpu_queue_is_acted_on(service, mirror, github_app) -> None:
    """A rolling upgrade: messages of the control tasks already waiting on ``cpu`` are not stranded."""
    fake, _ = github_app
    head = mirror[1]["legacy"]
    body = pull_request("opened", head, mirror[1]["legacy_base"])
    body["number"] = body["pull_request"]["number"] = 7
    with session_scope(service.database_url) as session:
        received = receive(session, service_settings(service), "pull_request", "legacy-1", with_installation(body))
    assert received.status == 202 and received.stored is not None, received.body
    send_task(service.broker_url, HANDLE_DELIVERY, received.stored, queue=CPU)  # as the API sent it before
    check = wait_for(lambda: in_progress_check_run(fake, head), "the check run of the legacy delivery's run",
                     timeout_s=120)
    assert check["body"]["status"] == "in_progress"


def test_the_first_answer_comes_while_every_cpu_worker_runs_a_job(service, mirror, github_app) -> None:
    fake, _ = github_app
    sleeping, head = mirror[1]["sleeping"], mirror[1]["pull"]

    def observe(call: dict) -> None:
        """What the sleeping run's jobs and the pull request's run were doing when its check run came."""
        if call["method"] == "POST" and (call["body"] or {}).get("head_sha") == head:
            call["then"] = {"sleeping": jobs_by_status(service.database_url, sleeping),
                            "pull": jobs_by_status(service.database_url, head)}

    fake.observers.append(observe)
    push = payload("push")
    push.update(ref="refs/heads/master", after=sleeping, deleted=False)
    answer = webhook_client.deliver_over_http(service.url, "push", with_installation(push), None,
                                              webhook_client.SECRET)
    assert answer.status_code == 202, answer.text
    # The worker's one pool process runs the first sleeping job; the second waits on the cpu queue.
    wait_for(lambda: jobs_by_status(service.database_url, sleeping) == ["queued", "running"],
             "a sleeping job running, the other queued", timeout_s=240, interval_s=0.1)

    answer = webhook_client.deliver_over_http(service.url, "pull_request",
                                              with_installation(pull_request("opened", head, sleeping)), None,
                                              webhook_client.SECRET)
    assert answer.status_code == 202, answer.text
    check = wait_for(lambda: in_progress_check_run(fake, head), "the pull request's check run", timeout_s=240)
    assert check["body"]["status"] == "in_progress"
    # It came while the sleeping job still ran (its second job still queued behind it), before the pull
    # request's own run was planned: nothing waited for the busy pool.
    assert check["then"] == {"sleeping": ["queued", "running"], "pull": []}, check["then"]
