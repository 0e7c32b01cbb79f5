"""A verified webhook delivery turned into runs. GitHub is never called here: reports go out from
the queue.

A delivery counts as handled only once what it asked for is stored: the delivery row (whose unique
id makes a redelivery a duplicate), its runs and its cancellations are written in one transaction.
GitHub does not redeliver on its own, so nothing is acknowledged that was not also queued: when the
broker refuses a new run's ``plan_run``, the delivery row and the runs it created are deleted again
and the answer is 503, and GitHub's redelivery then acts as if the first attempt never happened.
Deleting rather than keeping the runs for a later sweep leaves one way back (the redelivery), with
nothing planned twice. Reports need no such care: they are stored as owed (``github_reports``) and
the worker's sweep sends those whose message was lost. Answers that act on nothing (4xx) record
nothing either, so a delivery refused before the repository was allowed can be redelivered after.
"""
from __future__ import annotations

import dataclasses
import logging
from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from gradci.services import dispatch
from gradci.services.db.models import Delivery, GitHubReport, Repository, Run, RunStatus, Trigger
from gradci.services.db.runs import (
    RunAlreadyFinished,
    create_run,
    delete_runs,
    get_or_create_repository,
    lock_for_transaction,
    request_cancel,
)
from gradci.services.github.events import Decision, DecisionKind, decide, payload_type_error
from gradci.services.reports.run_report import base_run
from gradci.services.settings import Settings

log = logging.getLogger(__name__)

ACTIVE = (RunStatus.queued.value, RunStatus.running.value)


@dataclasses.dataclass
class Outcome:
    """What one delivery did, as stored: the answer, the runs to plan and the runs to report on."""

    status: int
    body: dict[str, Any]
    new_runs: list[int] = dataclasses.field(default_factory=list)
    cancelled: list[int] = dataclasses.field(default_factory=list)


def clone_url_template(settings: Settings) -> str | None:
    """Only an explicitly configured template overrides the payload's clone URL."""
    return settings.clone_url_template if "clone_url_template" in settings.model_fields_set else None


def refusal(decision: Decision) -> tuple[int, dict] | None:
    """The 4xx answer to a decision gradci may not or cannot act on, or None."""
    if decision.kind == DecisionKind.refuse:
        return 403, {"detail": decision.reason}
    acts = decision.kind in (DecisionKind.run_pr, DecisionKind.cancel_pr, DecisionKind.baseline)
    needs_head = decision.kind != DecisionKind.cancel_pr  # cancelling needs only the pull request
    if acts and (not decision.full_name or not decision.clone_url or (needs_head and not decision.head_sha)):
        return 400, {"detail": "payload lacks the repository, clone URL or head commit"}
    return None


def record_delivery(session: Session, delivery: Delivery) -> bool:
    """Add the delivery row to the open transaction, last; False, and the transaction rolled back,
    when its id is already stored (on PostgreSQL a concurrent attempt with the same id waits here
    until the first one ends). Redeliveries are rare: their work is undone rather than every
    delivery paying for a second write of its row."""
    session.add(delivery)
    try:
        session.flush()
    except IntegrityError:
        session.rollback()
        return False
    return True


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


def _needs_base_run(session: Session, run: Run) -> bool:
    """No run of the base commit yet: one must be scheduled, and only one however many pull requests
    on that base arrive at once (the second check runs once the others' transactions ended). The
    pending report rows cannot change the answer: they wait for the delivery's own flush."""
    with session.no_autoflush:
        if not run.base_sha or base_run(session, run, finished_only=False) is not None:
            return False
        lock_for_transaction(session, f"base-run:{run.repository_id}:{run.base_sha}")
        return base_run(session, run, finished_only=False) is None


def act(session: Session, decision: Decision) -> Outcome:
    """Store what the decision asks for in the open transaction (the caller commits)."""
    if decision.kind == DecisionKind.ping:
        return Outcome(200, {"ping": "pong"})
    if decision.kind in (DecisionKind.ignore, DecisionKind.await_approval):
        return Outcome(202, {"ignored": decision.reason})
    assert decision.clone_url is not None, "decide() validated where an acted-on delivery is fetched from"
    repository = get_or_create_repository(session, decision.clone_url, decision.full_name)
    cancelled: list[int] = []
    if decision.kind in (DecisionKind.run_pr, DecisionKind.cancel_pr) and decision.pr_number is not None:
        # Two pushes to one pull request at once: the later one must see (and cancel) the earlier run.
        lock_for_transaction(session, f"pull-request:{repository.id}:{decision.pr_number}")
        active = active_pr_runs(session, repository.id, decision.pr_number)
        # A newer push supersedes the older run; a closed pull request needs none.
        cancelled = cancel_runs(session, [r for r in active if decision.kind == DecisionKind.cancel_pr
                                          or r.head_sha != decision.head_sha])
        if decision.kind == DecisionKind.run_pr and any(r.head_sha == decision.head_sha for r in active):
            return Outcome(202, {"ignored": "a run of this commit is already in progress", "cancelled": cancelled},
                           cancelled=cancelled)
    new_runs: list[Run] = []
    if decision.kind == DecisionKind.run_pr:
        run = _tracked_run(session, decision, repository, Trigger.webhook.value, head_sha=decision.head_sha,
                           base_sha=decision.base_sha, ref=decision.ref, pr_number=decision.pr_number)
        new_runs.append(run)
        if _needs_base_run(session, run):
            # No base to compare with: schedule one; the pull request's report waits for it.
            new_runs.append(_tracked_run(session, decision, repository, Trigger.push.value,
                                         head_sha=decision.base_sha))
    elif decision.kind == DecisionKind.baseline:
        new_runs.append(_tracked_run(session, decision, repository, Trigger.push.value,
                                     head_sha=decision.head_sha, ref=decision.ref))
    run_ids = [run.id for run in new_runs]
    return Outcome(202, {"runs": run_ids, "cancelled": cancelled}, new_runs=run_ids, cancelled=cancelled)


def queue(session: Session, settings: Settings, delivery_id: str, outcome: Outcome) -> bool:
    """Send the stored outcome's messages; False (the delivery forgotten again) when a plan could not
    be queued. Plans go first: a plan already sent for a run deleted here finds no run and stops."""
    try:
        for run_id in outcome.new_runs:
            dispatch.submit_plan(run_id, settings)
    except dispatch.DispatchError as exc:
        log.warning("delivery %s not handled, GitHub must redeliver it: %s", delivery_id, exc)
        session.execute(delete(Delivery).where(Delivery.delivery_id == delivery_id))
        delete_runs(session, outcome.new_runs)
        session.commit()
        return False
    try:
        for run_id in outcome.cancelled + outcome.new_runs:
            dispatch.submit_publish(run_id, settings)
    except dispatch.DispatchError as exc:
        log.warning("reports of delivery %s left to the worker's sweep: %s", delivery_id, exc)
    return True


def handle(session: Session, settings: Settings, event: str, delivery_id: str, payload: dict) -> tuple[int, dict]:
    """(HTTP status, body) for one verified delivery. Database errors propagate (the API answers 503)."""
    type_error = payload_type_error(event, payload)  # first: deciding reads these fields
    if type_error is not None:
        return 400, {"detail": type_error}
    decision = decide(event, payload, settings.allowed_repos, clone_url_template(settings))
    refused = refusal(decision)
    if refused is not None:
        return refused
    outcome = act(session, decision)
    delivery = Delivery(delivery_id=delivery_id, event=event, action=payload.get("action"), payload=payload,
                        run_id=outcome.new_runs[0] if outcome.new_runs else None)
    if not record_delivery(session, delivery):
        return 200, {"duplicate": True, "delivery": delivery_id}
    session.commit()
    if not queue(session, settings, delivery_id, outcome):
        return 503, {"detail": "the queue is unreachable: nothing was started; redeliver this delivery later"}
    return outcome.status, outcome.body
