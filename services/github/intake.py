"""A verified webhook delivery: decided and stored in its request, acted on by a worker.

GitHub is never called here: reports go out from the queue.

The request (``receive``) does only what the payload alone decides (``decide``, no I/O): a ping,
a refusal (403 not allowed, 400 malformed) and an event or action gradci ignores are answered at
once and store nothing, so a delivery refused before its repository was allowed can be redelivered
after. A delivery to act on is stored with its decision in one statement (``INSERT … ON CONFLICT
(delivery_id) DO NOTHING``: a redelivery or a replay answers 200 duplicate) and committed before it
is acknowledged (202): GitHub does not redeliver on its own, so nothing is acknowledged that is not
stored. Its ``handle_delivery`` message is sent after the answer, which waits for neither the broker
nor the work: a message that is lost, or never sent because the broker was down, is sent again by
the elected worker's reconciler once the delivery has waited ``GRADCI_RECONCILE_GRACE_S``.

The worker (``act_on_delivery``) acts on a delivery exactly once: the runs it starts, the runs it
supersedes cancelled, and the delivery marked processed with what it did, in one transaction — a
second message of it finds it processed and does nothing, and a worker that died midway left
nothing but the stored delivery, which its redelivered or resent message brings back. The
deliveries of one pull request are acted on in the order they were stored (a delivery first acts on
the earlier ones still pending, whose messages may come late), so a newer push always supersedes an
older one and a close follows the opening it closes. Plans and reports are sent once that
transaction is committed; one the broker loses is sent again by the reconciler (a run with no plan)
or the report sweep (a report owed).
"""
from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from gradci.scenarios.contract.matrix import Matrix
from gradci.services.broker import dispatch
from gradci.services.db.availability import DATABASE_UNAVAILABLE
from gradci.services.db.deliveries import pending_deliveries, store_delivery, subject_of
from gradci.services.db.models import Delivery, GitHubReport, Repository, Run, RunStatus, Trigger, utcnow
from gradci.services.db.registry import registered_names
from gradci.services.db.runs import (
    RunAlreadyFinished,
    create_rerun,
    create_run,
    get_or_create_repository,
    lock_for_transaction,
    request_cancel,
)
from gradci.services.db.session import session_scope
from gradci.services.github import check_runs
from gradci.services.github.app_auth import client_for
from gradci.services.github.client import GitHubError
from gradci.services.github.events import Decision, DecisionKind, decide, payload_type_error
from gradci.services.reports.run_report import base_run
from gradci.services.settings import Settings

log = logging.getLogger(__name__)

ACTIVE = (RunStatus.queued.value, RunStatus.running.value)
FROM_A_REPOSITORY = (DecisionKind.run_pr, DecisionKind.cancel_pr, DecisionKind.baseline, DecisionKind.rerun)
ACTED_ON = (*FROM_A_REPOSITORY, DecisionKind.installation, DecisionKind.unregistered)
Send = Callable[[int], None]  # a run's id to plan or report on


@dataclasses.dataclass(frozen=True)
class Received:
    """The answer to one delivery, and its stored row's id when a worker is to act on it."""

    status: int
    body: dict[str, Any]
    stored: int | None = None


@dataclasses.dataclass
class Outcome:
    """What acting on one delivery did: its stored outcome, the runs to plan and the runs to report on."""

    body: dict[str, Any]
    new_runs: list[int] = dataclasses.field(default_factory=list)
    cancelled: list[int] = dataclasses.field(default_factory=list)
    refused: Decision | None = None  # an unregistered repository's commit: told so on its check run


def clone_url_template(settings: Settings) -> str | None:
    """Only an explicitly configured template overrides the payload's clone URL."""
    return settings.clone_url_template if "clone_url_template" in settings.model_fields_set else None


def refusal(decision: Decision) -> tuple[int, dict] | None:
    """The 4xx answer to a decision gradci may not or cannot act on, or None."""
    if decision.kind == DecisionKind.refuse:
        return 403, {"detail": decision.reason}
    needs_head = decision.kind != DecisionKind.cancel_pr  # cancelling needs only the pull request
    if decision.kind in FROM_A_REPOSITORY and (not decision.full_name or not decision.clone_url
                                               or (needs_head and not decision.head_sha)):
        return 400, {"detail": "payload lacks the repository, clone URL or head commit"}
    return None


def subject(decision: Decision) -> str | None:
    """The pull request a decision concerns, "owner/name#number": its deliveries are acted on in order."""
    if decision.kind in (DecisionKind.run_pr, DecisionKind.cancel_pr) and decision.pr_number is not None:
        return f"{decision.full_name}#{decision.pr_number}"
    return None


def receive(session: Session, settings: Settings, event: str, delivery_id: str, payload: dict) -> Received:
    """The answer to one verified delivery; one to act on is stored and committed first.

    Then send its message with ``announce``. Database errors propagate: the API answers 503 and GitHub
    shows the delivery as failed, to be redelivered.
    """
    type_error = payload_type_error(event, payload)  # first: deciding reads these fields
    if type_error is not None:
        return Received(400, {"detail": type_error})
    decision = decide(event, payload, settings.allowed_repos, clone_url_template(settings),
                      app_mode=settings.github_app_mode, registered=registered_names(session),
                      full_label=settings.full_run_label)
    refused = refusal(decision)
    if refused is not None:
        return Received(*refused)
    if decision.kind == DecisionKind.ping:
        return Received(200, {"ping": "pong"})
    if decision.kind not in ACTED_ON:
        return Received(202, {"delivery": delivery_id, "ignored": decision.reason})
    stored = store_delivery(session, delivery_id=delivery_id, event=event, payload=payload,
                            decision=dataclasses.asdict(decision), subject=subject(decision))
    session.commit()
    if stored is None:
        return Received(200, {"duplicate": True, "delivery": delivery_id})
    return Received(202, {"delivery": delivery_id, "accepted": decision.kind.value, "reason": decision.reason},
                    stored)


def announce(settings: Settings, stored: int) -> None:
    """Send a stored delivery's ``handle_delivery``.

    A broker that refuses costs time, not the delivery: the reconciler sends the message once the
    delivery has waited for the grace.
    """
    try:
        dispatch.submit_delivery(stored, settings)
    except dispatch.DispatchError as exc:
        log.warning("delivery %s stored but not announced, left to the reconciler: %s", stored, exc)


# --- in the worker: acting on a stored delivery, once ---------------------------------------------


def act_on_delivery(settings: Settings, delivery: int, *, plan: Send, publish: Send) -> list[Outcome]:
    """Act on the stored delivery ``delivery`` (the row's id), then send the plans and reports it owes.

    First act on its pull request's earlier deliveries still pending, unless a worker did already; then
    send the new runs' plans and the reports of the runs started and cancelled (``publish`` may publish
    them at once: the pending status is a pull request's first answer). What the broker refuses now,
    the reconciler (plans) and the report sweep (reports) send later.
    """
    with session_scope(settings.database_url) as session:
        outcomes = act_on_stored(session, delivery)
    for outcome in outcomes:
        _send_each(outcome.new_runs, plan, "plan")
    for outcome in outcomes:  # the new runs' pending reports first: what the pull request waits for
        _send_each(outcome.new_runs + outcome.cancelled, publish, "report")
    for outcome in outcomes:
        if outcome.refused is not None:
            refuse_on_check_run(settings, outcome.refused)
    return outcomes


def refuse_on_check_run(settings: Settings, decision: Decision) -> None:
    """Tell an unregistered repository's owner, on the commit's check run, why nothing of theirs runs.

    This server runs nothing of theirs. Best effort: a refusal GitHub does not take now is only logged.
    """
    assert decision.full_name and decision.head_sha, "an unregistered decision names its commit"
    try:
        with client_for(settings, decision.installation_id, decision.full_name) as client:
            check_runs.refuse(client, decision.full_name, decision.head_sha,
                              f"{decision.reason}: ask the server's operator to add it. Nothing was run.")
    except GitHubError as exc:
        log.warning("the refusal of %s@%s was not sent: %s", decision.full_name, decision.head_sha, exc)


def act_on_stored(session: Session, delivery_id: int) -> list[Outcome]:
    """Act on the stored delivery and on its pull request's earlier deliveries still pending.

    In the open transaction (the caller commits). The earlier deliveries come first, each marked
    processed with what it did. Nothing when a worker acted on it already (this is a second message of
    it).
    """
    stored, subject = subject_of(session, delivery_id)
    if subject is not None:
        # One pull request's deliveries one after the other: the later one must see what the earlier did.
        lock_for_transaction(session, subject_lock(subject))
    pending = pending_deliveries(session, delivery_id, subject) if stored else []
    if delivery_id not in [delivery.id for delivery in pending]:
        log.info("delivery %s: acted on already, nothing to do", delivery_id)
    return [_act_once(session, delivery) for delivery in pending]


def subject_lock(subject: str) -> str:
    """The key of ``lock_for_transaction`` a pull request's deliveries are acted on under, one at a time."""
    return f"deliveries:{subject}"


def stored_decision(stored: dict[str, Any]) -> Decision:
    fields: dict[str, Any] = {**stored, "kind": DecisionKind(stored["kind"])}
    for name in ("added", "removed"):  # JSON has no tuples
        if name in fields:
            fields[name] = tuple(fields[name])
    return Decision(**fields)


def _act_once(session: Session, delivery: Delivery) -> Outcome:
    assert delivery.decision is not None, "every delivery stored unprocessed has its decision (migration 0013)"
    decision = stored_decision(delivery.decision)
    try:
        with session.begin_nested():  # what one delivery cannot store must not undo the others'
            outcome = act(session, decision)
    except DATABASE_UNAVAILABLE:
        raise  # the task is retried: nothing of this transaction was stored
    except Exception as exc:  # acting again would fail again: recorded, not retried forever
        log.exception("delivery %s (%s) could not be acted on", delivery.delivery_id, decision.kind)
        outcome = Outcome({"error": f"{type(exc).__name__}: {exc}"[:2000]})
    delivery.processed_at, delivery.outcome = utcnow(), outcome.body
    delivery.run_id = outcome.new_runs[0] if outcome.new_runs else None
    log.info("delivery %s (%s %s): %s", delivery.id, delivery.event, delivery.action, outcome.body)
    return outcome


def _send_each(run_ids: list[int], send: Send, what: str) -> None:
    for run_id in run_ids:
        try:
            send(run_id)
        except Exception as exc:  # noqa: BLE001 - any transport's failure: stored, so sent again later
            log.warning("run %s: its %s was not sent, left to the worker's sweep: %s", run_id, what, exc)


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


def base_run_lock(repository_id: int, base_sha: str) -> str:
    """The key of ``lock_for_transaction`` that one base commit's missing run is scheduled under."""
    return f"base-run:{repository_id}:{base_sha}"


def _needs_base_run(session: Session, run: Run) -> bool:
    """Whether the run's base commit has no run yet, so one must be scheduled.

    Only one, however many pull requests on that base arrive at once (the second check runs once the
    others' transactions ended). The pending report rows cannot change the answer: they wait for the
    delivery's own flush.
    """
    with session.no_autoflush:
        if not run.base_sha or base_run(session, run, finished_only=False) is not None:
            return False
        assert run.repository_id is not None, "a pull request's run has its repository"
        lock_for_transaction(session, base_run_lock(run.repository_id, run.base_sha))
        return base_run(session, run, finished_only=False) is None


def act(session: Session, decision: Decision) -> Outcome:
    """Store what a decision to act on asks for, in the open transaction (the caller commits)."""
    if decision.kind == DecisionKind.installation:
        return _installation(session, decision)
    if decision.kind == DecisionKind.unregistered:  # nothing stored, nothing run: only the refusal sent
        return Outcome({"refused": decision.reason}, refused=decision)
    assert decision.kind in FROM_A_REPOSITORY and decision.clone_url is not None, "receive() stored only these"
    repository = get_or_create_repository(session, decision.clone_url, decision.full_name)
    if decision.installation_id is not None:  # App mode: its token reports on the repository's runs
        repository.github_installation_id = decision.installation_id
    if decision.kind == DecisionKind.rerun:
        return _rerun(session, decision, repository)
    cancelled: list[int] = []
    if decision.kind in (DecisionKind.run_pr, DecisionKind.cancel_pr) and decision.pr_number is not None:
        # Two pushes to one pull request at once: the later one must see (and cancel) the earlier run.
        lock_for_transaction(session, f"pull-request:{repository.id}:{decision.pr_number}")
        active = active_pr_runs(session, repository.id, decision.pr_number)
        # A newer push supersedes the older run; a closed pull request needs none.
        cancelled = cancel_runs(session, [r for r in active if decision.kind == DecisionKind.cancel_pr
                                          or r.head_sha != decision.head_sha])
        if decision.kind == DecisionKind.run_pr and any(r.head_sha == decision.head_sha for r in active):
            return Outcome({"ignored": "a run of this commit is already in progress", "cancelled": cancelled},
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
    return Outcome({"runs": run_ids, "cancelled": cancelled}, new_runs=run_ids, cancelled=cancelled)


def _installation(session: Session, decision: Decision) -> Outcome:
    """Record which repositories report through gradci's App installation.

    The repositories gradci's App was installed on (or came back to) report through that installation;
    those it was removed from report no more. Repositories gradci has not seen yet are recorded by their
    first webhook, which names its installation.
    """
    changed: dict[str, list[str]] = {"installed": [], "removed": []}
    for names, installation, key in ((decision.added, decision.installation_id, "installed"),
                                     (decision.removed, None, "removed")):
        for repository in session.scalars(select(Repository).where(Repository.full_name.in_(list(names)))):
            repository.github_installation_id = installation
            changed[key].append(repository.full_name or repository.url)
    return Outcome({"installation": decision.installation_id, **changed})


def _rerun(session: Session, decision: Decision, repository: Repository) -> Outcome:
    """GitHub's Re-run: the same commit and matrix run again, reported as a new check run.

    It reruns the rerequested check run's run (or the commit's latest run). An uploaded run has no code
    here to run.
    """
    query = select(Run).where(Run.repository_id == repository.id)
    query = query.where(Run.id == decision.run_id) if decision.run_id is not None else \
        query.where(Run.head_sha == decision.head_sha).order_by(Run.id.desc()).limit(1)
    run = session.scalars(query).first()
    if run is None:
        return Outcome({"ignored": f"no run of {repository.full_name} to re-run"})
    if run.trigger == Trigger.upload.value:
        return Outcome({"ignored": f"run {run.id} was uploaded by the project's CI: re-run its CI job"})
    again = create_rerun(session, run, matrix=Matrix.from_mapping(run.matrix))
    assert again is not None, "a rerun over a given matrix is always made"
    session.add(GitHubReport(run_id=again.id, full_name=decision.full_name))
    return Outcome({"runs": [again.id], "rerun_of": run.id}, new_runs=[again.id])
