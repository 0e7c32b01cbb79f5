"""A running run's failures so far on GitHub: the first failure shown as soon as it is stored.

A job that stores a failing cell asks for an update (``claim_progress``): one conditional update of
the run's report row lets through at most one per run every ``PROGRESS_INTERVAL_S`` and
``PROGRESS_UPDATES_MAX`` in all, however many jobs and workers fail at once. ``publish_progress``
then sends the failing cells stored by then: the check run's output (App mode; it stays in
progress, only the final report completes it) or the pending statuses' description (token mode).

Best effort: a progress update GitHub does not take is not retried — the next failure or the final
report says more. A run that finished while its update was on the way has its report published again
at once, so that the final word is the last one GitHub hears.
"""
from __future__ import annotations

import dataclasses
import logging
from datetime import datetime, timedelta

from sqlalchemy import func, or_, select, update

from gradci.scenarios.contract.cell import FAILING
from gradci.scenarios.contract.wording import count_of
from gradci.services.db.models import GitHubReport, Result, Run, RunStatus, utcnow
from gradci.services.db.session import session_scope
from gradci.services.db.upsert import rows_matched
from gradci.services.github import check_runs
from gradci.services.github.app_auth import client_for
from gradci.services.github.client import GitHubError
from gradci.services.github.publish import contexts_of, dashboard_url, publish_run
from gradci.services.github_limits import PROGRESS_INTERVAL_S, PROGRESS_UPDATES_MAX
from gradci.services.reports.gfm import code, one_line
from gradci.services.settings import Settings

log = logging.getLogger(__name__)

LISTED = 20  # failing cells named in the check run's summary
RUNNING = (RunStatus.queued.value, RunStatus.running.value)


@dataclasses.dataclass(frozen=True)
class Failure:
    """One failing cell as the update names it."""

    scenario: str
    backend: str
    device: str
    dtype: str
    status: str
    message: str

    def words(self) -> str:
        return f"{self.scenario} ({self.backend}, {self.device}, {self.dtype})"


def claim_progress(settings: Settings, run_id: int, now: datetime | None = None) -> bool:
    """Whether this caller may send the run's next progress update (and the right is now taken).

    No: the run reports to no GitHub, its last update is under ``PROGRESS_INTERVAL_S`` old, or it
    had ``PROGRESS_UPDATES_MAX`` of them.
    """
    now = now or utcnow()
    with session_scope(settings.database_url) as session:
        won = session.execute(
            update(GitHubReport)
            .where(GitHubReport.run_id == run_id, GitHubReport.progress_updates < PROGRESS_UPDATES_MAX,
                   or_(GitHubReport.progress_at.is_(None),
                       GitHubReport.progress_at <= now - timedelta(seconds=PROGRESS_INTERVAL_S)))
            .values(progress_at=now, progress_updates=GitHubReport.progress_updates + 1)
            .execution_options(synchronize_session=False))
        return rows_matched(won) == 1


def progress_text(failures: list[Failure], count: int) -> tuple[str, str, str]:
    """(the check run's title, its markdown summary, a status description) of the failures so far."""
    first = failures[0].words()
    title = f"Checking derivatives… {count_of(count, 'failing cell')} so far, first: {one_line(first)}"
    rows = [f"- {code(f.scenario, in_table=False)} on {code(f.backend, in_table=False)}, "
            f"{code(f.device, in_table=False)}, {code(f.dtype, in_table=False)}: **{f.status}**"
            + (f" — {code(f.message[:300], in_table=False)}" if f.message else "") for f in failures]
    more = f"\n\n… and {count - len(failures)} more." if count > len(failures) else ""
    summary = ("The run is still going: these cells failed so far. The full report follows when it "
               "finishes.\n\n" + "\n".join(rows) + more)
    return title, summary, f"Checking derivatives… {count} failing so far, first: {one_line(first)}"


def failures_so_far(settings: Settings, run_id: int) -> tuple[list[Failure], int]:
    """The run's first ``LISTED`` failing cells in the order they were stored, and how many there are."""
    failing = (Result.run_id == run_id, Result.status.in_(sorted(FAILING)))
    with session_scope(settings.database_url, readonly=True) as session:
        rows = session.execute(select(Result.scenario, Result.backend, Result.device, Result.dtype, Result.status,
                                      Result.message).where(*failing).order_by(Result.id).limit(LISTED))
        failures = [Failure(*row) for row in rows]
        count = session.scalar(select(func.count()).select_from(Result).where(*failing)) or 0
    return failures, count


@dataclasses.dataclass(frozen=True)
class _Target:
    full_name: str
    sha: str
    contexts: tuple[str, ...]
    installation_id: int | None
    check_run_id: int | None


def _target(settings: Settings, run_id: int) -> _Target | None:
    """Where the running run's update goes; None once it finished, or with nowhere to go yet."""
    with session_scope(settings.database_url, readonly=True) as session:
        row, run = session.get(GitHubReport, run_id), session.get(Run, run_id)
        if row is None or run is None or not run.head_sha or run.status not in RUNNING:
            return None
        if settings.github_app_mode and row.check_run_id is None:  # its pending report has not created it yet
            return None
        return _Target(row.full_name, run.head_sha, contexts_of(run),
                       run.repository.github_installation_id if run.repository else None, row.check_run_id)


def publish_progress(run_id: int, settings: Settings) -> bool:
    """Show the running run's failures so far on GitHub; whether an update was sent."""
    target = _target(settings, run_id)
    if target is None:
        return False
    failures, count = failures_so_far(settings, run_id)
    if not failures:
        return False
    title, summary, description = progress_text(failures, count)
    try:
        with client_for(settings, target.installation_id, target.full_name) as client:
            if settings.github_app_mode:
                assert target.check_run_id is not None, "_target waits for the check run"
                check_runs.progress(client, target.full_name, target.check_run_id, title, summary)
            else:
                for context in target.contexts:
                    client.set_status(target.full_name, target.sha, context, "pending", description,
                                      dashboard_url(settings, run_id))
    except GitHubError as exc:
        log.warning("run %s: its failures so far were not shown on GitHub: %s", run_id, exc)
        return False
    if _target(settings, run_id) is None:  # finished meanwhile: its final report may have gone out before this
        publish_run(run_id, settings)
    return True
