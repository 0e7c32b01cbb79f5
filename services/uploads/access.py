"""Who may upload which repository's results.

Authentication is per repository, in two forms: an upload token (``gradci tokens create OWNER/NAME``)
or, from GitHub Actions, the workflow's OIDC id token, whose ``repository`` claim names the
repository. Either is sent as ``Authorization: Bearer …``. A credential uploads for its own
repository only (403 for another), for a repository ``GRADCI_ALLOWED_REPOS`` allows, and — as
webhooks are — not for a pull request from a fork until a maintainer labels it ``gradci:run``.
"""
from __future__ import annotations

import dataclasses

from gradci.services.db.session import session_scope
from gradci.services.github.client import GitHubClient, GitHubError
from gradci.services.github.events import DEFAULT_APPROVAL_LABEL, awaiting_approval, repository_allowed
from gradci.services.settings import Settings
from gradci.services.uploads import oidc, tokens


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
    return Credential(repository=claims["repository"])


def authorize(settings: Settings, credential: Credential, repository: str, pr_number: int | None) -> None:
    """Raises ``Forbidden`` unless ``credential`` may upload results of ``repository`` (for the pull
    request ``pr_number``, if any); ``Unavailable`` when GitHub cannot say whether it is a fork's."""
    if credential.repository.casefold() != repository.casefold():  # GitHub's names ignore case
        raise Forbidden(f"{credential.describe()} is for {credential.repository}, not {repository}")
    if not repository_allowed(repository, settings.allowed_repos):
        raise Forbidden(f"repository {repository!r} is not in GRADCI_ALLOWED_REPOS")
    if pr_number is not None:
        refuse_unapproved_fork(settings, repository, pr_number)


def refuse_unapproved_fork(settings: Settings, repository: str, pr_number: int) -> None:
    """The webhook rule for uploads: a fork's pull request is untrusted until labelled (GitHub says
    which it is: the upload's own account of it comes from the code being judged)."""
    token = settings.github_token.get_secret_value() if settings.github_token else None
    try:
        with GitHubClient(settings.github_api_url, token, attempts=2) as client:
            pull_request = client.pull_request(repository, pr_number)
    except GitHubError as exc:
        if exc.status_code == 404:
            raise Forbidden(f"GitHub has no pull request {pr_number} in {repository}") from None
        raise Unavailable(f"cannot ask GitHub about pull request {pr_number}: {exc}") from None
    if awaiting_approval({"pull_request": pull_request}):
        raise Forbidden(f"pull request {pr_number} comes from a fork: a maintainer must add the label "
                        f"{DEFAULT_APPROVAL_LABEL!r} before its results are accepted")
