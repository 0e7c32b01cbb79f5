"""Sending a run's report to GitHub: commit statuses or a check run, and the pull-request comment.

Commit statuses `gradci/project` and `gradci/patch` (token mode) or a check run with annotations
(App mode: ``check_runs``), and the one pull-request comment, edited in place. Runs uploaded by a
project's CI speak under their own names (`gradci/upload/...`, their own check run and comment
section): no upload can change what the service's own run said. Idempotent: publishing twice sends
the same state twice (a check run's annotations once).

What is owed is in the database (``GitHubReport``), so an outage delays a report but never loses
it: every attempt first sets when the next may start, ``report_retry_base_s`` doubling with each
failed attempt up to ``report_retry_max_s``; the sweeper (``claim_due_reports``, after the elected
worker's heartbeats) sends a pending report again once that time has come — one message per
report per backoff step, whatever the number of workers or heartbeats.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from datetime import datetime, timedelta

from sqlalchemy import ColumnElement, and_, or_, select, update
from sqlalchemy.orm import Session

from gradci.services.db.models import GitHubReport, ReportState, Run, RunStatus, Trigger, utcnow
from gradci.services.db.session import session_scope
from gradci.services.db.upsert import rows_matched
from gradci.services.github import check_runs, pr_comment
from gradci.services.github.app_auth import client_for, installation_tokens
from gradci.services.github.client import GitHubClient, GitHubError
from gradci.services.github.identity import own_login
from gradci.services.reports.annotations import Annotation, failing_scenario_annotations, rule_annotations
from gradci.services.reports.gfm import code
from gradci.services.reports.markdown import MARKER, render
from gradci.services.reports.report_record import RunReport
from gradci.services.reports.run_report import report_for_run, waiting_for_base
from gradci.services.settings import Settings, get_settings

CONTEXTS = ("gradci/project", "gradci/patch")
UPLOAD_CONTEXTS = ("gradci/upload/project", "gradci/upload/patch")


def contexts_of(run: Run) -> tuple[str, ...]:
    """The statuses ``run`` writes.

    An uploaded run writes its own, never the service's; the patch status is written on pull requests
    only.
    """
    contexts = UPLOAD_CONTEXTS if run.trigger == Trigger.upload.value else CONTEXTS
    return contexts if run.pr_number else contexts[:1]


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
    contexts = contexts_of(run)
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


@dataclasses.dataclass
class _Publication:
    """What one attempt sends, read from the database before anything goes out."""

    full_name: str
    sha: str
    pr_number: int | None
    phase: str
    statuses: list[tuple[str, str, str]]
    body: str | None  # the pull-request comment
    run_status: str
    installation_id: int | None
    check_run_id: int | None
    final_before: bool  # the final report was published already: a check run's annotations are not sent again
    annotations: list[Annotation]
    summary: str
    check_name: str


def publish_run(run_id: int, settings: Settings | None = None) -> str:
    """Publish what GitHub should show for ``run_id`` now; returns the report's state.

    GitHub being unreachable leaves it pending, due again after the backoff. Token mode sends commit
    statuses, App mode a check run; both the pull-request comment.
    """
    settings = settings or get_settings()
    with session_scope(settings.database_url) as session:
        row = session.get(GitHubReport, run_id)
        run = session.get(Run, run_id)
        if row is None or run is None or not run.head_sha:
            return "none"
        phase, statuses, report = plan_statuses(session, run)
        # The report as markdown: the pull request's comment, and in App mode the check run's summary.
        rendered = (render(report, dashboard_url(settings, run.id))
                    if report is not None and (run.pr_number or settings.github_app_mode) else None)
        body = rendered if run.pr_number else None
        if body is not None and run.status == RunStatus.skipped.value:
            why = code(run.error_message, in_table=False) if run.error_message else "every cell was skipped"
            body = (f"**Nothing was checked**: {why}. A run that ran "
                    f"no cell is not a pass: bring a worker for its devices online, or check why its scenarios "
                    f"skip.\n\n{body}")
        if body is not None:
            body = pr_comment.comment_body(session, run, body, lambda other: dashboard_url(settings, other))
        final_before = row.published_phase == "final"
        annotations = (failing_scenario_annotations(session, run.id)
                       + rule_annotations(report.rules if report else None)
                       if settings.github_app_mode and phase == "final" and not final_before else [])
        attempt = _Publication(row.full_name, run.head_sha, run.pr_number, phase, statuses, body, run.status,
                               run.repository.github_installation_id if run.repository else None, row.check_run_id,
                               final_before, annotations, rendered or statuses[0][2],
                               check_runs.UPLOAD_CHECK_NAME if pr_comment.is_upload(run) else check_runs.CHECK_NAME)
        now = utcnow()
        # Due again after the backoff, should this attempt fail or never finish (its worker died).
        row.state, row.attempts, row.updated_at = ReportState.pending.value, row.attempts + 1, now
        row.next_attempt_at = now + timedelta(seconds=retry_delay_s(settings, row.attempts))
    try:
        with client_for(settings, attempt.installation_id, attempt.full_name) as client:
            if settings.github_app_mode:
                _send_check_run(client, settings, run_id, attempt)
            else:
                for context, state, description in attempt.statuses:
                    client.set_status(attempt.full_name, attempt.sha, context, state, description,
                                      dashboard_url(settings, run_id))
            if attempt.body is not None and attempt.pr_number is not None:  # pull requests only
                client.upsert_comment(attempt.full_name, attempt.pr_number, attempt.body, MARKER,
                                      own_login(settings, client))
    except GitHubError as exc:
        if exc.status_code == 401 and attempt.installation_id is not None:  # a revoked token: ask anew next time
            installation_tokens.forget(settings, attempt.installation_id)
        state = ReportState.pending if exc.retryable or exc.status_code == 401 else ReportState.failed
        _record(settings, run_id, state, None, str(exc))
        return state.value
    _record(settings, run_id, ReportState.published, attempt.phase, None)
    return ReportState.published.value


def conclusion(run_status: str, project_state: str) -> str:
    """A check run's conclusion: cancelled, success or failure.

    Cancelled runs say so; only a passing project status is success (a run that checked nothing is a
    failure: branch protection counts neutral as a pass).
    """
    if run_status == RunStatus.cancelled.value:
        return "cancelled"
    return "success" if project_state == "success" else "failure"


def _send_check_run(client: GitHubClient, settings: Settings, run_id: int, attempt: _Publication) -> None:
    """The check run of ``attempt`` created (its id stored at once), updated or completed."""
    title = attempt.statuses[0][2]
    check_run_id = attempt.check_run_id
    if check_run_id is None:
        check_run_id = check_runs.start(client, attempt.full_name, attempt.sha, run_id,
                                        dashboard_url(settings, run_id), title, attempt.check_name)
        _record_check_run(settings, run_id, check_run_id)
    if attempt.phase != "final":
        return
    if attempt.final_before:
        check_runs.update(client, attempt.full_name, check_run_id, title, attempt.summary)
    else:
        check_runs.complete(client, attempt.full_name, check_run_id, conclusion(attempt.run_status,
                            attempt.statuses[0][1]), title, attempt.summary, attempt.annotations)


def _record_check_run(settings: Settings, run_id: int, check_run_id: int) -> None:
    # At once: a failure later in this attempt must not make the next one create a second check run.
    with session_scope(settings.database_url) as session:
        row = session.get(GitHubReport, run_id)
        if row is not None:
            row.check_run_id = check_run_id


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
    """Mark the reports of ``run_ids`` pending; returns the runs that have a report.

    Their run changed: GitHub must hear of it. They are due for the sweeper after the backoff's base,
    should the message sent now be lost.
    """
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
    """The sweep: claim the pending reports whose next attempt is due.

    Each is claimed by pushing that attempt one backoff step later in a conditional update — of several
    workers sweeping at once, one wins each report, and it sends one message for it.
    """
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
