"""Who may upload which repository's results.

Authentication is per repository, in two forms: an upload token (``gradci tokens create OWNER/NAME``)
or, from GitHub Actions, the workflow's OIDC id token, whose ``repository`` and ``repository_id``
claims name the repository and whose ``sha`` the commit. Either is sent as ``Authorization: Bearer …``.
A credential uploads for its own repository only (403 for another), for a repository
``GRADCI_ALLOWED_REPOS`` allows — an id token only for one it names: any repository on GitHub can
get one —, and for a commit GitHub ties to what the upload says: a pull request's head must be the
uploaded commit, and the commit's pull requests are looked up when none is named, so that no commit
of a fork's pull request is accepted until a maintainer approved that very commit (``gradci:run``,
added after it was pushed, as webhooks run it).
"""
from __future__ import annotations

import dataclasses
import re
from typing import Any

from sqlalchemy import func, select

from gradci.services.db.models import Delivery
from gradci.services.db.registry import registered_names
from gradci.services.db.session import session_scope
from gradci.services.github.client import GitHubClient, GitHubError
from gradci.services.github.events import (
    DEFAULT_APPROVAL_LABEL,
    DecisionKind,
    has_label,
    is_fork,
    repository_allowed,
    repository_registered,
)
from gradci.services.settings import Settings
from gradci.services.uploads import oidc, tokens

# The ref of a pull_request workflow: its id token's sha is GitHub's merge commit, not the head.
PULL_REQUEST_REF = re.compile(r"^refs/pull/(\d+)/merge$")


class NotAuthenticated(Exception):
    """No credential this server accepts (401)."""


class Forbidden(Exception):
    """A good credential, for something it may not do (403)."""


class Unavailable(Exception):
    """What the decision needs (the OIDC issuer, GitHub) cannot be reached now (503)."""


@dataclasses.dataclass(frozen=True)
class Credential:
    repository: str  # owner/name the credential may upload for
    token_id: int | None = None  # the upload token's row; None: an OIDC id token
    repository_id: str | None = None  # an id token's: GitHub's id of the repository (a name can be reused)
    sha: str | None = None  # an id token's: the commit its workflow ran for
    ref: str | None = None  # an id token's: the workflow's ref

    def describe(self) -> str:
        return f"upload token {self.token_id}" if self.token_id is not None else "the id token"


def bearer(header: str | None) -> str | None:
    scheme, _, token = (header or "").partition(" ")
    return token.strip() or None if scheme.lower() == "bearer" else None


def oidc_audience(settings: Settings) -> str | None:
    """The audience id tokens must name: GRADCI_OIDC_AUDIENCE, else the server's public URL."""
    return settings.oidc_audience or (settings.public_url.rstrip("/") if settings.public_url else None)


def authenticate(settings: Settings, token: str) -> Credential:
    """The credential ``token`` is; raises ``NotAuthenticated`` or ``Unavailable``."""
    if tokens.is_upload_token(token):
        with session_scope(settings.database_url, readonly=True) as session:
            row = tokens.find_token(session, token)
            if row is None:
                raise NotAuthenticated("unknown or revoked upload token")
            return Credential(repository=row.full_name, token_id=row.id)
    audience = oidc_audience(settings)
    if audience is None:
        raise NotAuthenticated("this server takes no id tokens: it has neither GRADCI_OIDC_AUDIENCE nor "
                               "GRADCI_PUBLIC_URL; send an upload token (GRADCI_UPLOAD_TOKEN)")
    try:
        claims = oidc.issuer(settings.oidc_issuer).verify(token, audience)
    except oidc.IdTokenRefused as exc:
        raise NotAuthenticated(str(exc)) from None
    except oidc.IssuerUnavailable as exc:
        raise Unavailable(str(exc)) from None
    return Credential(repository=claims["repository"], repository_id=str(claims["repository_id"]),
                      sha=str(claims["sha"]).lower(), ref=str(claims.get("ref") or ""))


def authorize(settings: Settings, credential: Credential, repository: str, sha: str,
              pr_number: int | None) -> None:
    """Refuse an upload its credential may not make.

    Raises ``Forbidden`` unless ``credential`` may upload results of ``repository`` at commit ``sha``
    (for the pull request ``pr_number``, if any); ``Unavailable`` when GitHub cannot be asked.
    """
    if credential.repository.casefold() != repository.casefold():  # GitHub's names ignore case
        raise Forbidden(f"{credential.describe()} is for {credential.repository}, not {repository}")
    with session_scope(settings.database_url, readonly=True) as session:
        registered = registered_names(session)
    if not repository_allowed(repository, settings.allowed_repos, registered):
        raise Forbidden(f"repository {repository!r} is not in GRADCI_ALLOWED_REPOS (nor registered: gradci repos add)")
    if credential.token_id is None and not repository_registered(repository, settings.allowed_repos, registered):
        raise Forbidden(f"id tokens are accepted only for repositories the operator registered: {repository!r} "
                        "is not (gradci repos add, or GRADCI_ALLOWED_REPOS; or use an upload token: gradci "
                        "tokens create)")
    token = settings.github_token.get_secret_value() if settings.github_token else None
    try:
        with GitHubClient(settings.github_api_url, token, attempts=2) as client:
            if credential.token_id is None:
                check_id_token(client, credential, repository, sha, pr_number)
            pulls = [pull_request_at(client, repository, sha, pr_number)] if pr_number is not None else \
                pull_requests_of(client, repository, sha)
    except GitHubError as exc:
        raise Unavailable(f"cannot ask GitHub about {repository}@{sha[:12]}: {exc}") from None
    for pull in pulls:
        refuse_unapproved_fork(settings, repository, sha, pull)


def _get(client: GitHubClient, path: str, missing: str) -> Any:
    """GitHub's answer to ``GET path``; ``Forbidden`` with ``missing`` when it has no such thing."""
    try:
        return client.request("GET", path).json()
    except GitHubError as exc:
        if exc.status_code in (404, 422):  # 422: GitHub's answer for a commit it does not have
            raise Forbidden(missing) from None
        raise


def check_id_token(client: GitHubClient, credential: Credential, repository: str, sha: str,
                   pr_number: int | None) -> None:
    """Refuse an id token of another repository or another commit.

    An id token is of one repository (by id: a deleted repository's name can be taken again) and one
    commit: its own sha, or on a pull_request workflow (whose sha is the merge commit) that pull
    request's head, which ``pull_request_at`` checks.
    """
    known = _get(client, f"/repos/{repository}", f"GitHub has no repository {repository}")
    if str(known.get("id")) != credential.repository_id:
        raise Forbidden(f"the id token is for repository id {credential.repository_id}, but {repository} is "
                        f"{known.get('id')} on GitHub")
    pulled = PULL_REQUEST_REF.match(credential.ref or "")
    if pulled is not None and pr_number is not None and int(pulled.group(1)) == pr_number:
        return
    if credential.sha != sha:
        raise Forbidden(f"the id token is for commit {credential.sha}, not {sha}")


def pull_request_at(client: GitHubClient, repository: str, sha: str, pr_number: int) -> dict:
    """Pull request ``pr_number``, whose head must be ``sha``: an upload speaks of the commit it checked."""
    pull = _get(client, f"/repos/{repository}/pulls/{pr_number}",
                f"GitHub has no pull request {pr_number} in {repository}")
    head = ((pull.get("head") or {}).get("sha") or "").lower()
    if head != sha:
        raise Forbidden(f"pull request {pr_number}'s head is {head or 'unknown'}, not {sha}: upload the "
                        "commit the pull request shows")
    return pull


def pull_requests_of(client: GitHubClient, repository: str, sha: str) -> list[dict]:
    """The open pull requests GitHub associates with ``sha`` (``GET /commits/{sha}/pulls``).

    An upload that names none is still judged by the fork rule of each.
    """
    pulls = _get(client, f"/repos/{repository}/commits/{sha}/pulls?per_page=100",
                 f"GitHub has no commit {sha} in {repository}")
    return [pull for pull in pulls if isinstance(pull, dict) and pull.get("state", "open") == "open"]


def refuse_unapproved_fork(settings: Settings, repository: str, sha: str, pull: dict) -> None:
    """The webhook rule for uploads: a fork's pull request is untrusted until its commit is approved.

    A maintainer must approve the very commit uploaded (GitHub says which pull request is a fork's: the
    upload's own account of it comes from the code being judged).
    """
    if not is_fork({"pull_request": pull}):
        return
    number = pull.get("number")
    if has_label({"pull_request": pull}) and approved_commit(settings, repository, number, sha):
        return
    raise Forbidden(f"pull request {number} comes from a fork: a maintainer must add the label "
                    f"{DEFAULT_APPROVAL_LABEL!r} once {sha[:12]} is its head before its results are accepted")


def approved_commit(settings: Settings, repository: str, pr_number: Any, sha: str) -> bool:
    """Whether a maintainer added the approval label while ``sha`` was the pull request's head.

    Its ``labeled`` webhook was stored with that head. (Without the repository's webhooks, no fork's
    commit is approved.)
    """
    with session_scope(settings.database_url, readonly=True) as session:
        decisions = session.scalars(select(Delivery.decision).where(
            Delivery.event == "pull_request", Delivery.action == "labeled",
            func.lower(Delivery.subject) == f"{repository}#{pr_number}".lower()))
        return any(decision and decision.get("kind") == DecisionKind.run_pr.value
                   and (decision.get("full_name") or "").casefold() == repository.casefold()
                   and (decision.get("head_sha") or "").lower() == sha for decision in decisions)
