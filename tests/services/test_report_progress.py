"""A running run's failures so far on GitHub: at most one update per run every few seconds however many
jobs ask at once, a cap per run, the first failure named (escaped), nothing once the run finished
(real PostgreSQL and SQLite, a fake GitHub over HTTP)."""
from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import update

from gradci.services.db.models import GitHubReport, Run, RunStatus, utcnow
from gradci.services.db.results import upsert_results
from gradci.services.db.session import session_scope
from gradci.services.github.progress import Failure, claim_progress, progress_text, publish_progress
from gradci.services.github_limits import PROGRESS_INTERVAL_S, PROGRESS_UPDATES_MAX
from gradci.services.settings import Settings
from tests.support.fake_github import FakeGitHub


@pytest.fixture
def settings(database_url: str, tmp_path: Path, clean_environment) -> Settings:
    return Settings(database_url=database_url, workdir=tmp_path)


def reported_run(url: str, make_run, status: str = RunStatus.running.value) -> int:  # type: ignore[no-untyped-def]
    run_id = make_run(url, head_sha="a" * 40, pr_number=2)
    with session_scope(url) as session:
        session.execute(update(Run).where(Run.id == run_id).values(status=status))
        session.add(GitHubReport(run_id=run_id, full_name="octo/repo"))
    return run_id


def test_one_update_per_run_per_interval_and_a_cap(settings: Settings, make_run) -> None:
    url = settings.database_url
    run_id = reported_run(url, make_run)
    barrier = threading.Barrier(4)

    def ask(_: int) -> bool:
        barrier.wait(timeout=10)
        return claim_progress(settings, run_id)

    with ThreadPoolExecutor(4) as pool:
        assert sorted(pool.map(ask, range(4))) == [False, False, False, True]  # four jobs failing at once
    now = utcnow()
    assert not claim_progress(settings, run_id, now + timedelta(seconds=PROGRESS_INTERVAL_S / 2))
    assert claim_progress(settings, run_id, now + timedelta(seconds=PROGRESS_INTERVAL_S + 1))
    with session_scope(url) as session:
        session.execute(update(GitHubReport).values(progress_updates=PROGRESS_UPDATES_MAX))
    assert not claim_progress(settings, run_id, now + timedelta(hours=1))
    assert not claim_progress(settings, make_run(url), now + timedelta(hours=1))  # reports to no GitHub


def test_the_first_failure_is_named_and_what_the_pull_request_chose_is_escaped() -> None:
    hostile = Failure("x`y <!-- @octocat [a](http://evil)", "torch-rev", "cpu", "float64", "fail", "too\nfar")
    title, summary, description = progress_text([hostile], 3)
    assert title.startswith("Checking derivatives… 3 failing cells so far, first: x`y")
    assert "``x`y <!-- @octocat [a](http://evil)``" in summary and "`too⏎far`" in summary
    assert "… and 2 more." in summary and "\n" not in description


def test_the_pending_statuses_name_the_failures_so_far_until_the_run_finishes(settings: Settings, make_run,
                                                                             cell_factory) -> None:
    url = settings.database_url
    run_id = reported_run(url, make_run)
    with session_scope(url) as session:
        upsert_results(session, run_id, [cell_factory(1, status="pass"), cell_factory(2, status="fail"),
                                         cell_factory(3, status="error")])
    with FakeGitHub() as fake:
        token_mode = Settings(database_url=url, workdir=settings.workdir, github_api_url=fake.url, github_token="t")
        assert publish_progress(run_id, token_mode)
        statuses = fake.statuses_for("a" * 40)
        assert {s["context"] for s in statuses} == {"gradci/project", "gradci/patch"}
        assert all(s["state"] == "pending" and "2 failing so far, first: scenario_00002 (jax-rev, cpu, float64)"
                   in s["description"] for s in statuses)
        with session_scope(url) as session:
            session.execute(update(Run).where(Run.id == run_id).values(status=RunStatus.failed.value))
        calls = len(fake.calls)
        assert not publish_progress(run_id, token_mode)  # finished: the final report speaks
        assert len(fake.calls) == calls
