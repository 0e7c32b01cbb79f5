"""Sending a run's report to GitHub: commit statuses `gradci/project` and `gradci/patch`, and the one
pull-request comment, edited in place. Idempotent: publishing twice sends the same state twice."""
from __future__ import annotations

from sqlalchemy.orm import Session

from services.db.models import GitHubReport, ReportState, Run, RunStatus, utcnow
from services.db.session import session_scope
from services.github.client import GitHubClient, GitHubError
from services.reports.markdown import MARKER, render
from services.reports.model import RunReport
from services.reports.run_report import report_for_run, waiting_for_base
from services.settings import Settings, get_settings

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
    finished = run.status in (RunStatus.passed.value, RunStatus.failed.value)
    base = waiting_for_base(session, run)
    if not finished or base is not None:
        description = _pending_description(run, base)
        return "pending", [(c, "pending", description) for c in contexts], None
    report = report_for_run(session, run)
    statuses = [(context, status.state, status.description)
                for context, status in zip(contexts, (report.project, report.patch))]
    return "final", statuses, report


def publish_run(run_id: int, settings: Settings | None = None) -> str:
    """Publish what GitHub should show for ``run_id`` now; returns the report's state. Raises
    GitHubError when GitHub is unreachable (the row stays pending: the caller retries)."""
    settings = settings or get_settings()
    with session_scope(settings.database_url) as session:
        row = session.get(GitHubReport, run_id)
        run = session.get(Run, run_id)
        if row is None or run is None or not run.head_sha:
            return "none"
        phase, statuses, report = plan_statuses(session, run)
        body = render(report, dashboard_url(settings, run.id)) if report is not None and run.pr_number else None
        full_name, sha, pr_number = row.full_name, run.head_sha, run.pr_number
        row.state, row.attempts, row.updated_at = ReportState.pending.value, row.attempts + 1, utcnow()
    token = settings.github_token.get_secret_value() if settings.github_token else None
    try:
        with GitHubClient(settings.github_api_url, token) as client:
            for context, state, description in statuses:
                client.set_status(full_name, sha, context, state, description, dashboard_url(settings, run_id))
            if body is not None:
                client.upsert_comment(full_name, pr_number, body, MARKER)
    except GitHubError as exc:
        _record(settings, run_id, ReportState.pending if exc.retryable else ReportState.failed, None, str(exc))
        if exc.retryable:
            raise
        return ReportState.failed.value
    _record(settings, run_id, ReportState.published, phase, None)
    return ReportState.published.value


def _record(settings: Settings, run_id: int, state: ReportState, phase: str | None, error: str | None) -> None:
    with session_scope(settings.database_url) as session:
        row = session.get(GitHubReport, run_id)
        row.state, row.last_error, row.updated_at = state.value, error, utcnow()
        if phase:
            row.published_phase = phase


def stale_pending_reports(settings: Settings, older_than_s: float) -> list[int]:
    """Reports still owed to GitHub whose last attempt is older than ``older_than_s``: the sweep
    that makes an outage delay a report rather than lose it (a retry message can be lost with a
    worker)."""
    from datetime import timedelta

    from sqlalchemy import select

    cutoff = utcnow() - timedelta(seconds=older_than_s)
    with session_scope(settings.database_url, readonly=True) as session:
        return list(session.scalars(select(GitHubReport.run_id).where(
            GitHubReport.state == ReportState.pending.value, GitHubReport.updated_at < cutoff)))
