"""Pending GitHub reports go out again through one sweeper with exponential backoff stored in the
database: one message per report per backoff step, however many heartbeats or workers look — never
a flood of its own making while GitHub is away (real PostgreSQL and SQLite, a fake GitHub over HTTP,
and a real worker on Redis for the flood itself).
"""
from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path

import pytest
import redis
from sqlalchemy import update

from gradci._testing.processes import free_port, service_env, stop, wait_for
from gradci._testing.service import start_worker
from gradci.services.broker.queues import CONTROL_QUEUE
from gradci.services.db.models import GitHubReport, ReportState, utcnow
from gradci.services.db.session import session_scope
from gradci.services.github.publish import claim_due_reports, owe_reports, publish_run, retry_delay_s
from gradci.services.settings import Settings
from tests.support.fake_github import FakeGitHub

BASE_S = 30.0
LONG_AGO = timedelta(hours=1)


def settings_for(database_url: str, workdir: Path) -> Settings:
    return Settings(database_url=database_url, workdir=workdir, report_retry_base_s=BASE_S,
                    report_retry_max_s=8 * BASE_S)


@pytest.fixture
def settings(database_url: str, tmp_path: Path, clean_environment) -> Settings:
    return settings_for(database_url, tmp_path)


def pending_reports(url: str, make_run, count: int, *,  # type: ignore[no-untyped-def]
                    since: timedelta = LONG_AGO) -> list[int]:
    """Runs with a report owed to GitHub, pending (never attempted) for ``since``."""
    run_ids = [make_run(url, head_sha=f"{index:040x}") for index in range(count)]
    with session_scope(url) as session:
        session.add_all(GitHubReport(run_id=run_id, full_name="octo/repo", updated_at=utcnow() - since)
                        for run_id in run_ids)
    return run_ids


def report(url: str, run_id: int) -> GitHubReport:
    with session_scope(url, readonly=True) as session:
        return session.get(GitHubReport, run_id)


def test_the_backoff_doubles_up_to_its_maximum(settings: Settings) -> None:
    assert [retry_delay_s(settings, attempts) for attempts in range(1, 7)] == [30, 60, 120, 240, 240, 240]


def test_each_due_report_is_sent_once_per_backoff_step(settings: Settings, make_run) -> None:
    url = settings.database_url
    run_ids = pending_reports(url, make_run, 40)
    recent = pending_reports(url, make_run, 1, since=timedelta(0))  # its first message may still be on the way
    sent = [run_id for _heartbeat in range(10) for run_id in claim_due_reports(settings, limit=100)]
    assert sorted(sent) == run_ids and recent[0] not in sent
    assert report(url, run_ids[0]).next_attempt_at > utcnow() + timedelta(seconds=BASE_S - 5)

    with session_scope(url) as session:  # the first step has passed
        session.execute(update(GitHubReport).values(next_attempt_at=utcnow() - timedelta(seconds=1)))
    assert sorted(claim_due_reports(settings, limit=100)) == sorted(run_ids + recent)
    assert claim_due_reports(settings, limit=100) == []


def test_sweepers_at_once_send_each_report_once(settings: Settings, make_run) -> None:
    run_ids = pending_reports(settings.database_url, make_run, 120)
    barrier = threading.Barrier(4)

    def sweep(_: int) -> list[int]:
        barrier.wait(timeout=10)
        return claim_due_reports(settings, limit=200)

    with ThreadPoolExecutor(4) as pool:
        swept = [run_id for claimed in pool.map(sweep, range(4)) for run_id in claimed]
    assert sorted(swept) == run_ids  # every report by exactly one sweeper


@pytest.mark.integration
def test_publishing_backs_off_while_github_is_down_and_starts_over_once_published(
        postgres_url: str, tmp_path: Path, clean_environment, make_run) -> None:
    settings = settings_for(postgres_url, tmp_path)  # one database is enough: GitHub's retries take seconds
    url = settings.database_url
    (run_id,) = pending_reports(url, make_run, 1)
    with FakeGitHub() as github:
        settings.github_api_url = github.url
        github.fail_next = [503] * 4  # every attempt the client makes
        assert publish_run(run_id, settings) == ReportState.pending.value  # no exception, no Celery retry
        row = report(url, run_id)
        assert row.attempts == 1 and "503" in row.last_error
        assert abs((row.next_attempt_at - utcnow()).total_seconds() - BASE_S) < 10
        assert claim_due_reports(settings, limit=10) == []  # not due before its backoff

        with session_scope(url) as session:  # the run changed: GitHub must hear of it, due after the base
            assert owe_reports(session, [run_id], settings) == [run_id]
        assert publish_run(run_id, settings) == ReportState.published.value
        row = report(url, run_id)
        assert row.state == ReportState.published.value and row.attempts == 0 and row.next_attempt_at is None
        assert github.statuses_for(f"{0:040x}")


@pytest.mark.integration
def test_pending_reports_do_not_flood_the_queue(postgres_url: str, redis_url: str, make_run, tmp_path: Path) -> None:
    """The issue's flood on a real worker: 60 reports pending for an hour, GitHub unreachable, a
    heartbeat every 0.2 s. Each report is sent once; before the sweeper, every heartbeat sent every
    report still pending again."""
    reports = 60
    pending_reports(postgres_url, make_run, reports)
    env = service_env(database_url=postgres_url, broker_url=redis_url, workdir=str(tmp_path),
                      github_api_url=f"http://127.0.0.1:{free_port()}", worker_heartbeat_s="0.2")
    worker = start_worker(env, tmp_path)
    broker = redis.Redis.from_url(redis_url)
    try:
        # Publishing is the control node's (its queue; plans of the runs go to "cpu"): it takes two at a
        # time, each waiting seconds on the unreachable GitHub, so the rest stay queued.
        wait_for(lambda: broker.llen(CONTROL_QUEUE) > 0, "the first reports sent", timeout_s=60, interval_s=0.05)
        time.sleep(3)  # 15 heartbeats: each used to send all 60 again
        queued = broker.llen(CONTROL_QUEUE)
    finally:
        stop(worker)
        broker.close()
    print((tmp_path / "gradci.worker.log").read_text()[-3000:])
    assert 0 < queued <= reports
