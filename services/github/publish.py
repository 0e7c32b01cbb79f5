"""Sending a run's report to GitHub: commit statuses `gradci/project` and `gradci/patch`, and the one
pull-request comment, edited in place. Idempotent: publishing twice sends the same state twice.

What is owed is in the database (``GitHubReport``), so an outage delays a report but never loses
it: every attempt first sets when the next may start, ``report_retry_base_s`` doubling with each
failed attempt up to ``report_retry_max_s``; the sweeper (``claim_due_reports``, after the elected
worker's heartbeats) sends a pending report again once that time has come — one message per
report per backoff step, whatever the number of workers or heartbeats.
"""
from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from sqlalchemy import ColumnElement, and_, or_, select, update
from sqlalchemy.orm import Session

from gradci.services.db.models import GitHubReport, ReportState, Run, RunStatus, utcnow
from gradci.services.db.session import session_scope
from gradci.services.db.upsert import rows_matched
from gradci.services.github.client import GitHubClient, GitHubError
from gradci.services.reports.markdown import MARKER, render
from gradci.services.reports.model import RunReport
from gradci.services.reports.run_report import report_for_run, waiting_for_base
from gradci.services.settings import Settings, get_settings

CONTEXTS = ("gradci/project", "gradci/patch")


def dashboard_url(settings: Settings, run_id: int) -> str | None:
    return f"{settings.public_url.rstrip('/')}/runs/{run_id}" if settings.public_url else None


def _pending_description(run: Run, base: Run | None) -> str:
    if run.status == RunStatus.queued.value:
        return "Queued: waiting for a worker"
    if run.status == RunStatus.running.value:
        return "Checking derivatives…"
    return f"Waiting for the base run of {(base.head_sha or '')[:7]}" if base else "Preparing the report"


def plan_statuses(session: Session, run: Run) -> tuple[str, list[tuple[str, str, str]], RunReport | None]:
    """(phase, [(context, state, description)], the report or None) for the run as it stands."""
    contexts = CONTEXTS if run.pr_number else CONTEXTS[:1]
    if run.status in (RunStatus.cancelled.value, RunStatus.error.value):
        why = "cancelled (superseded or closed)" if run.status == RunStatus.cancelled.value else \
            f"error: {run.error_message or 'the run failed'}"
        return "final", [(c, "error", f"Run {why}") for c in contexts], None
    if run.status == RunStatus.skipped.value:  # never success: nothing was checked
        description = f"Nothing checked: {run.error_message or 'every cell was skipped'}"
        return "final", [(c, "failure", description) for c in contexts], report_for_run(session, run)
    finished = run.status in (RunStatus.passed.value, RunStatus.failed.value)
    base = waiting_for_base(session, run)
    if not finished or base is not None:
        description = _pending_description(run, base)
        return "pending", [(c, "pending", description) for c in contexts], None
    report = report_for_run(session, run)
    statuses: list[tuple[str, str, str]] = [(context, status.state, status.description)
                for context, status in zip(contexts, (report.project, report.patch))]
    return "final", statuses, report


def retry_delay_s(settings: Settings, attempts: int) -> float:
    """How long after its ``attempts``-th attempt a pending report waits for the next."""
    return min(settings.report_retry_max_s, settings.report_retry_base_s * 2 ** max(0, attempts - 1))


def publish_run(run_id: int, settings: Settings | None = None) -> str:
    """Publish what GitHub should show for ``run_id`` now; returns the report's state. GitHub being
    unreachable leaves it pending, due again after the backoff."""
    settings = settings or get_settings()
    with session_scope(settings.database_url) as session:
        row = session.get(GitHubReport, run_id)
        run = session.get(Run, run_id)
        if row is None or run is None or not run.head_sha:
            return "none"
        phase, statuses, report = plan_statuses(session, run)
        body = render(report, dashboard_url(settings, run.id)) if report is not None and run.pr_number else None
        if body is not None and run.status == RunStatus.skipped.value:
            body = (f"**Nothing was checked**: {run.error_message or 'every cell was skipped'}. A run that ran "
                    f"no cell is not a pass: bring a worker for its devices online, or check why its scenarios "
                    f"skip.\n\n{body}")
        full_name, sha, pr_number = row.full_name, run.head_sha, run.pr_number
        now = utcnow()
        # Due again after the backoff, should this attempt fail or never finish (its worker died).
        row.state, row.attempts, row.updated_at = ReportState.pending.value, row.attempts + 1, now
        row.next_attempt_at = now + timedelta(seconds=retry_delay_s(settings, row.attempts))
    token = settings.github_token.get_secret_value() if settings.github_token else None
    try:
        with GitHubClient(settings.github_api_url, token) as client:
            for context, state, description in statuses:
                client.set_status(full_name, sha, context, state, description, dashboard_url(settings, run_id))
            if body is not None and pr_number is not None:  # a body is rendered for pull requests only
                client.upsert_comment(full_name, pr_number, body, MARKER)
    except GitHubError as exc:
        state = ReportState.pending if exc.retryable else ReportState.failed
        _record(settings, run_id, state, None, str(exc))
        return state.value
    _record(settings, run_id, ReportState.published, phase, None)
    return ReportState.published.value


def _record(settings: Settings, run_id: int, state: ReportState, phase: str | None, error: str | None) -> None:
    with session_scope(settings.database_url) as session:
        row = session.get(GitHubReport, run_id)
        assert row is not None, "a report is recorded only once it is owed"
        row.state, row.last_error, row.updated_at = state.value, error, utcnow()
        if state is not ReportState.pending:  # nothing left to retry: the backoff starts over next time
            row.attempts, row.next_attempt_at = 0, None
        if phase:
            row.published_phase = phase


def owe_reports(session: Session, run_ids: Sequence[int], settings: Settings) -> list[int]:
    """Mark the reports of ``run_ids`` pending (their run changed: GitHub must hear of it), due for
    the sweeper after the backoff's base should the message sent now be lost; returns the runs
    that have a report."""
    now = utcnow()
    result = session.execute(
        update(GitHubReport).where(GitHubReport.run_id.in_(list(run_ids)))
        .values(state=ReportState.pending.value, updated_at=now,
                next_attempt_at=now + timedelta(seconds=settings.report_retry_base_s))
        .returning(GitHubReport.run_id).execution_options(synchronize_session=False))
    return sorted(result.scalars())


def _due(settings: Settings, now: datetime) -> ColumnElement[bool]:
    never_tried_since = now - timedelta(seconds=settings.report_retry_base_s)
    return and_(GitHubReport.state == ReportState.pending.value, or_(
        GitHubReport.next_attempt_at <= now,
        and_(GitHubReport.next_attempt_at.is_(None), GitHubReport.updated_at <= never_tried_since)))


def claim_due_reports(settings: Settings, limit: int) -> list[int]:
    """The sweep: pending reports whose next attempt is due, each claimed by pushing that attempt
    one backoff step later in a conditional update — of several workers sweeping at once, one wins
    each report, and it sends one message for it."""
    now = utcnow()
    claimed = []
    with session_scope(settings.database_url) as session:
        due = session.execute(select(GitHubReport.run_id, GitHubReport.attempts).where(_due(settings, now))
                              .order_by(GitHubReport.next_attempt_at, GitHubReport.run_id).limit(limit))
        for run_id, attempts in due.all():
            later = now + timedelta(seconds=retry_delay_s(settings, attempts + 1))
            won = session.execute(update(GitHubReport).where(GitHubReport.run_id == run_id, _due(settings, now))
                                  .values(next_attempt_at=later).execution_options(synchronize_session=False))
            if rows_matched(won) == 1:
                claimed.append(run_id)
    return claimed
