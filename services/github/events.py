"""What a webhook delivery asks of gradci, decided from the payload alone (no I/O).

Payloads come in the shape GitHub sends, including a null pull-request body and a null
``head.repo`` (the fork was deleted): every lookup here tolerates missing and null fields.
"""
from __future__ import annotations

import dataclasses
import enum
from collections.abc import Set
from typing import Any

from gradci.services.repo_refs import RepoRef, is_allowed

PR_RUN_ACTIONS = frozenset({"opened", "synchronize", "reopened"})
DEFAULT_APPROVAL_LABEL = "gradci:run"


class DecisionKind(enum.StrEnum):
    """What a delivery asks for."""

    ping = "ping"                      # GitHub checking the hook: answer pong
    run_pr = "run_pr"                  # check the pull request's head commit (superseding older runs of it)
    cancel_pr = "cancel_pr"            # the pull request closed: cancel its runs
    baseline = "baseline"              # a push to the default branch: check it, as future pull requests' base
    ignore = "ignore"                  # nothing to do for this event or action
    refuse = "refuse"                  # the repository is not allowed here
    await_approval = "await_approval"  # a fork's pull request: runs only once a maintainer labels it
    installation = "installation"      # App mode: gradci's App installed on, or removed from, repositories
    rerun = "rerun"                    # App mode: "Re-run" pressed on a check run or check suite
    unregistered = "unregistered"      # App mode: a repository the operator did not register: refused on its check run


@dataclasses.dataclass(frozen=True)
class Decision:
    kind: DecisionKind
    reason: str = ""
    full_name: str | None = None      # base repository, owner/name
    clone_url: str | None = None      # where the head commit can be fetched
    head_sha: str | None = None
    base_sha: str | None = None
    pr_number: int | None = None
    ref: str | None = None
    installation_id: int | None = None  # App mode: the installation the webhook came from
    run_id: int | None = None           # a rerun: the run whose check run was rerequested (None: the commit's latest)
    added: tuple[str, ...] = ()         # an installation: the repositories it now covers
    removed: tuple[str, ...] = ()       # ... and those it no longer covers


def _get(tree: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(tree, dict):
            return None
        tree = tree.get(key)
    return tree


# The payload fields gradci reads, with the JSON type each must have where present (null is fine):
# a signed payload with an object where a string belongs is refused with a 400, not stored.
TYPED_FIELDS: dict[str, tuple[tuple[tuple[str, ...], type], ...]] = {
    "pull_request": (
        (("pull_request",), dict), (("pull_request", "head"), dict), (("pull_request", "base"), dict),
        (("repository",), dict), (("label",), dict), (("pull_request", "labels"), list),
        (("action",), str), (("number",), int), (("pull_request", "number"), int),
        (("pull_request", "head", "sha"), str), (("pull_request", "base", "sha"), str),
        (("pull_request", "head", "ref"), str), (("label", "name"), str),
        (("repository", "full_name"), str), (("repository", "clone_url"), str),
    ),
    "push": (
        (("repository",), dict), (("ref",), str), (("after",), str), (("repository", "full_name"), str),
        (("repository", "clone_url"), str), (("repository", "default_branch"), str),
    ),
    "installation": ((("action",), str), (("installation",), dict), (("installation", "id"), int),
                     (("repositories",), list)),
    "installation_repositories": ((("action",), str), (("installation",), dict), (("installation", "id"), int),
                                  (("repositories_added",), list), (("repositories_removed",), list)),
    "check_run": ((("action",), str), (("check_run",), dict), (("check_run", "external_id"), str),
                  (("check_run", "head_sha"), str), (("repository",), dict), (("repository", "full_name"), str),
                  (("repository", "clone_url"), str)),
    "check_suite": ((("action",), str), (("check_suite",), dict), (("check_suite", "head_sha"), str),
                    (("repository",), dict), (("repository", "full_name"), str), (("repository", "clone_url"), str)),
}
# The App's own events: installations, and "Re-run" on a check run or suite (token mode ignores them).
INSTALLATION_EVENTS = ("installation", "installation_repositories")
RERUN_EVENTS = ("check_run", "check_suite")
REPOSITORY_EVENTS = ("pull_request", "push", *RERUN_EVENTS)  # of one repository, which must be allowed


def payload_type_error(event: str, payload: dict) -> str | None:
    """Which field of the payload has the wrong JSON type, or None."""
    for path, kind in TYPED_FIELDS.get(event, ()):
        value = _get(payload, *path)
        if value is not None and (not isinstance(value, kind) or isinstance(value, bool)):
            return f"payload field {'.'.join(path)} must be a {kind.__name__}, not {type(value).__name__}"
    return None


def repository_allowed(full_name: str | None, allowed: list[str], registered: Set[str] = frozenset()) -> bool:
    """Whether a repository is allowed: registered, or matching a glob over owner/name.

    The globs follow the same rule as the REST API's; an empty list allows every repository.
    ``registered``: the lower-cased owner/names ``gradci repos add`` registered, allowed whatever the
    globs.
    """
    return is_allowed(RepoRef(url=full_name or "", full_name=full_name), allowed, registered)


def repository_registered(full_name: str | None, allowed: list[str], registered: Set[str] = frozenset()) -> bool:
    """Whether the operator named this repository (``gradci repos add``, or ``GRADCI_ALLOWED_REPOS``).

    Closed by default, for what anyone can send — an App installation's webhooks, an OIDC id token of
    any repository the issuer signs for. An empty list registers nothing (``*`` opens it on purpose).
    """
    return (full_name or "").lower() in registered or (bool(allowed) and repository_allowed(full_name, allowed))


def is_fork(payload: dict) -> bool:
    head_repo = _get(payload, "pull_request", "head", "repo")
    base_name = _get(payload, "pull_request", "base", "repo", "full_name")
    if head_repo is None:  # the fork was deleted: its code is still untrusted
        return True
    return head_repo.get("full_name") != base_name


def has_label(payload: dict, label: str = DEFAULT_APPROVAL_LABEL) -> bool:
    labels = _get(payload, "pull_request", "labels") or []
    return label in [lbl.get("name") for lbl in labels if isinstance(lbl, dict)]


def clone_url(full_name: str | None, payload_url: str | None, template: str | None) -> str | None:
    """The configured template (mirrors, tests) wins over the payload's clone URL."""
    if template and full_name:
        return template.format(full_name=full_name)
    return payload_url


def decide(event: str, payload: dict, allowed: list[str], clone_url_template: str | None = None,
           approval_label: str = DEFAULT_APPROVAL_LABEL, app_mode: bool = False,
           registered: Set[str] = frozenset(), full_label: str | None = None) -> Decision:
    """What ``payload`` asks for.

    In App mode (``app_mode``) every webhook of a repository comes from an installation of gradci's App,
    which it names: one that names none is refused, and the App's own events (installations, re-run
    requests) are acted on; in token mode they are ignored. ``full_label``: the label that asks a pull
    request's run for every cell (``GRADCI_FULL_RUN_LABEL``); adding it runs the pull request again.
    """
    if event == "ping":
        return Decision(DecisionKind.ping, "pong")
    full_name = _get(payload, "repository", "full_name")
    admitted = repository_registered if app_mode else repository_allowed  # anyone may install an App
    if event in REPOSITORY_EVENTS and not admitted(full_name, allowed, registered):
        return _unregistered(event, payload, full_name, app_mode)
    if event in (*INSTALLATION_EVENTS, *RERUN_EVENTS) and not app_mode:
        return Decision(DecisionKind.ignore, f"event {event!r} is for GitHub App mode (GRADCI_GITHUB_APP_ID)")
    installation = _get(payload, "installation", "id")
    if app_mode and event in REPOSITORY_EVENTS and not isinstance(installation, int):
        return Decision(DecisionKind.refuse, f"the webhook names no installation of gradci's GitHub App: install "
                                             f"the App on {full_name} (gradci is in App mode)", full_name)
    if event == "pull_request":
        decision = _pull_request(payload, full_name, clone_url_template, approval_label, full_label)
    elif event == "push":
        decision = _push(payload, full_name, clone_url_template)
    elif event in INSTALLATION_EVENTS:
        decision = _installation(event, payload, allowed, registered)
    elif event in RERUN_EVENTS:
        decision = _rerequested(event, payload, full_name, clone_url_template)
    else:
        return Decision(DecisionKind.ignore, f"event {event!r} is not handled")
    return dataclasses.replace(decision, installation_id=installation if isinstance(installation, int) else None)


def _unregistered(event: str, payload: dict, full_name: str | None, app_mode: bool) -> Decision:
    """The decision for a repository the operator did not allow.

    In App mode its owner installed the App without the operator: a commit it pushes gets a refusal on
    its check run (the installation's token may write one), so the owner learns why nothing runs; token
    mode answers the webhook 403.
    """
    reason = (f"repository {full_name!r} is not registered with this gradci server (gradci repos add, or "
              "GRADCI_ALLOWED_REPOS)")
    installation = _get(payload, "installation", "id")
    head_sha = (_get(payload, "pull_request", "head", "sha") if event == "pull_request" else
                payload.get("after") if event == "push" else _get(payload, event, "head_sha"))
    if not app_mode or not isinstance(installation, int) or not isinstance(head_sha, str) \
            or payload.get("action") == "closed" or payload.get("deleted"):
        return Decision(DecisionKind.refuse, reason, full_name)
    return Decision(DecisionKind.unregistered, reason, full_name=full_name, head_sha=head_sha,
                    installation_id=installation)


def _names(repositories: Any, allowed: list[str], registered: Set[str] = frozenset()) -> tuple[str, ...]:
    listed = [_get(repository, "full_name") for repository in repositories or ()]
    return tuple(name for name in listed if isinstance(name, str) and repository_registered(name, allowed, registered))


def _installation(event: str, payload: dict, allowed: list[str], registered: Set[str]) -> Decision:
    """The repositories an installation covers now.

    All of them when it is created (or comes back), none when it is deleted or suspended;
    ``installation_repositories`` adds and removes some.
    """
    action = payload.get("action")
    if event == "installation_repositories":
        added, removed = (_names(payload.get("repositories_added"), allowed, registered),
                          _names(payload.get("repositories_removed"), ["*"]))
    elif action in ("created", "unsuspend", "new_permissions_accepted"):
        added, removed = _names(payload.get("repositories"), allowed, registered), ()
    elif action in ("deleted", "suspend"):
        added, removed = (), _names(payload.get("repositories"), ["*"])  # forgetting is safe for any
    else:
        return Decision(DecisionKind.ignore, f"installation action {action!r} is not handled")
    return Decision(DecisionKind.installation, f"{event} {action}", added=added, removed=removed)


def _rerequested(event: str, payload: dict, full_name: str | None, template: str | None) -> Decision:
    """GitHub's "Re-run", of one check run or of the whole suite of a commit.

    Our check run carries its run's id as ``external_id``; of a suite, the commit's latest run is run
    again.
    """
    action = payload.get("action")
    if action != "rerequested":
        return Decision(DecisionKind.ignore, f"{event} action {action!r} is not handled", full_name)
    head = payload.get(event) or {}
    external = head.get("external_id") if event == "check_run" else None
    run_id = int(external) if isinstance(external, str) and external.isdigit() else None
    if event == "check_run" and run_id is None:
        return Decision(DecisionKind.ignore, "a check run gradci did not create", full_name)
    return Decision(DecisionKind.rerun, f"{event} rerequested", full_name=full_name, head_sha=head.get("head_sha"),
                    run_id=run_id, clone_url=clone_url(full_name, _get(payload, "repository", "clone_url"), template))


def _pull_request(payload: dict, full_name: str | None, template: str | None, label: str,
                  full_label: str | None = None) -> Decision:
    action = payload.get("action")
    pr = payload.get("pull_request") or {}
    head_repo = _get(pr, "head", "repo") or {}
    base = dict(full_name=full_name, head_sha=_get(pr, "head", "sha"), base_sha=_get(pr, "base", "sha"),
                pr_number=pr.get("number") or payload.get("number"), ref=_get(pr, "head", "ref"),
                clone_url=clone_url(full_name, _get(payload, "repository", "clone_url"), template))
    if action == "closed":
        return Decision(DecisionKind.cancel_pr, "pull request closed", **base)
    fork = is_fork(payload)
    if fork and not template:
        # A fork's commits are fetched from the base repository's pull/N/head ref, which GitHub keeps
        # even after the fork is deleted.
        base["clone_url"] = _get(payload, "repository", "clone_url") or head_repo.get("clone_url")
    if action == "labeled" and full_label and _get(payload, "label", "name") == full_label != label:
        if fork:  # a fork's code runs only once approved: the full label applies to that run
            return Decision(DecisionKind.ignore, f"label {full_label!r} on a fork's pull request: its next approved "
                                                 f"run ({label!r}) runs every cell", **base)
        return Decision(DecisionKind.run_pr, f"labelled {full_label!r}: every cell runs", **base)
    if action == "labeled":
        if _get(payload, "label", "name") != label:
            return Decision(DecisionKind.ignore, f"label {_get(payload, 'label', 'name')!r} is not {label!r}",
                            **base)
        return Decision(DecisionKind.run_pr, f"approved with label {label!r}", **base)
    if action not in PR_RUN_ACTIONS:
        return Decision(DecisionKind.ignore, f"pull_request action {action!r} is not handled", **base)
    if fork:
        # An approval is of the commit the maintainer read, as GitHub's "approve and run" is: a label
        # left from an earlier push approves nothing pushed since, only its (re)adding does.
        how = (f"remove the label {label!r} and add it again (it approved an earlier commit)"
               if has_label(payload, label) else f"add the label {label!r}")
        return Decision(DecisionKind.await_approval, f"pull request from a fork: {how} to run {base['head_sha']}",
                        **base)
    return Decision(DecisionKind.run_pr, f"pull request {action}", **base)


def _push(payload: dict, full_name: str | None, template: str | None) -> Decision:
    ref = payload.get("ref") or ""
    default_branch = _get(payload, "repository", "default_branch")
    after = payload.get("after") or ""
    if ref != f"refs/heads/{default_branch}":
        return Decision(DecisionKind.ignore, f"push to {ref!r}, not the default branch", full_name)
    if payload.get("deleted") or set(after) == {"0"}:
        return Decision(DecisionKind.ignore, "branch deleted", full_name)
    return Decision(DecisionKind.baseline, f"push to {default_branch}", full_name=full_name, head_sha=after,
                    ref=ref, clone_url=clone_url(full_name, _get(payload, "repository", "clone_url"), template))
