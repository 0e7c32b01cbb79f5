"""A verified webhook delivery turned into runs: stored first (deduplicated by delivery id), then
decided, then acted on. GitHub is never called here: reports go out from the queue."""
from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from services import dispatch
from services.db.models import Delivery, GitHubReport, Repository, Run, RunStatus, Trigger
from services.db.runs import (RunAlreadyFinished, create_run, get_or_create_repository, mark_run_error,
                             request_cancel)
from services.github.events import Decision, DecisionKind, decide, payload_type_error
from services.reports.run_report import base_run
from services.settings import Settings

ACTIVE = (RunStatus.queued.value, RunStatus.running.value)


def clone_url_template(settings: Settings) -> str | None:
    """Only an explicitly configured template overrides the payload's clone URL."""
    return settings.clone_url_template if "clone_url_template" in settings.model_fields_set else None


def store_delivery(session: Session, delivery_id: str, event: str, payload: dict) -> Delivery | None:
    """The delivery row, or None when this delivery id was seen before (a redelivery)."""
    delivery = Delivery(delivery_id=delivery_id, event=event, action=payload.get("action"), payload=payload)
    session.add(delivery)
    try:
        session.commit()
    except IntegrityError:
        session.rollback()
        return None
    return delivery


def active_pr_runs(session: Session, repository_id: int, pr_number: int) -> list[Run]:
    return list(session.scalars(select(Run).where(Run.repository_id == repository_id, Run.pr_number == pr_number,
                                                  Run.status.in_(ACTIVE))))


def cancel_runs(session: Session, runs: list[Run]) -> list[int]:
    cancelled = []
    for run in runs:
        try:
            request_cancel(session, run)
            cancelled.append(run.id)
        except RunAlreadyFinished:
            pass
    return cancelled


def _tracked_run(session: Session, decision: Decision, repository: Repository, trigger: str,
                 **fields: Any) -> Run:
    run = create_run(session, repository=repository, trigger=trigger, **fields)
    session.add(GitHubReport(run_id=run.id, full_name=decision.full_name))
    return run


def handle(session: Session, settings: Settings, event: str, delivery_id: str, payload: dict) -> tuple[int, dict]:
    """(HTTP status, body) for one verified delivery."""
    type_error = payload_type_error(event, payload)
    if type_error is not None:
        return 400, {"detail": type_error}
    delivery = store_delivery(session, delivery_id, event, payload)
    if delivery is None:
        return 200, {"duplicate": True, "delivery": delivery_id}
    decision = decide(event, payload, settings.allowed_repos, clone_url_template(settings))
    if decision.kind == DecisionKind.ping:
        return 200, {"ping": "pong"}
    if decision.kind == DecisionKind.refuse:
        return 403, {"detail": decision.reason}
    if decision.kind in (DecisionKind.ignore, DecisionKind.await_approval):
        return 202, {"ignored": decision.reason}
    needs_head = decision.kind != DecisionKind.cancel_pr  # cancelling needs only the pull request
    if not decision.full_name or not decision.clone_url or (needs_head and not decision.head_sha):
        return 400, {"detail": "payload lacks the repository, clone URL or head commit"}

    new_runs: list[Run] = []
    cancelled: list[int] = []
    repository = get_or_create_repository(session, decision.clone_url, decision.full_name)
    if decision.kind in (DecisionKind.run_pr, DecisionKind.cancel_pr) and decision.pr_number is not None:
        active = active_pr_runs(session, repository.id, decision.pr_number)
        # A newer push supersedes the older run; a closed pull request needs none.
        cancelled = cancel_runs(session, [r for r in active if decision.kind == DecisionKind.cancel_pr
                                          or r.head_sha != decision.head_sha])
        if decision.kind == DecisionKind.run_pr and any(r.head_sha == decision.head_sha for r in active):
            session.commit()
            return 202, {"ignored": "a run of this commit is already in progress", "cancelled": cancelled}
    if decision.kind == DecisionKind.run_pr:
        run = _tracked_run(session, decision, repository, Trigger.webhook.value, head_sha=decision.head_sha,
                           base_sha=decision.base_sha, ref=decision.ref, pr_number=decision.pr_number)
        new_runs.append(run)
        if decision.base_sha and base_run(session, run, finished_only=False) is None:
            # No base to compare with: schedule one; the pull request's report waits for it.
            new_runs.append(_tracked_run(session, decision, repository, Trigger.push.value,
                                         head_sha=decision.base_sha))
    elif decision.kind == DecisionKind.baseline:
        new_runs.append(_tracked_run(session, decision, repository, Trigger.push.value,
                                     head_sha=decision.head_sha, ref=decision.ref))
    delivery.run_id = new_runs[0].id if new_runs else None
    session.commit()
    try:
        for run in new_runs:
            dispatch.submit_plan(run.id, settings)
        for run_id in cancelled + [run.id for run in new_runs]:
            dispatch.submit_publish(run_id, settings)
    except dispatch.DispatchError as exc:
        for run in new_runs:
            mark_run_error(session, run, str(exc))
        session.commit()
        return 503, {"detail": str(exc)}
    return 202, {"runs": [r.id for r in new_runs], "cancelled": cancelled}
