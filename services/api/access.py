"""Who asks, and what they may read, as FastAPI dependencies.

Every route that shows something of a run takes ``ReadAccess`` (``access.run(id)``, ``access.visible()``)
or ``OperatorAccess``; ``tests/services/test_read_access.py`` walks every route of the app and fails
on one that takes neither and is not listed there as public.

The asker is, first match: a bearer token (GRADCI_API_TOKEN: an operator; a read token: its
repositories; anything else: 401), the local user of ``gradci up`` (``read_access="local"`` and a
request addressed to a loopback name — a DNS-rebinding page's requests carry its own host name), or
the user signed in to the dashboard (a login in GRADCI_OPERATORS is an operator). Otherwise nobody.
"""
from __future__ import annotations

import ipaddress
from typing import Annotated, Any

from fastapi import Depends, HTTPException, Request, status
from sqlalchemy.orm import Session

from gradci.services.access.decision import ANONYMOUS, Asker, ReadDecision
from gradci.services.access.github_view import GitHubViews
from gradci.services.access.read_tokens import find_read_token
from gradci.services.api.deps import BearerCredentials, ReadSession, SettingsDep, is_admin_token
from gradci.services.api.sessions import signed_in
from gradci.services.db.models import Run
from gradci.services.db.queries import Visible
from gradci.services.settings import Settings

LOOPBACK_NAMES = ("localhost",)
# The OpenAPI of a read: a credential is optional (``{}``: anonymous is allowed, and sees what is public).
OPTIONAL_CREDENTIAL: dict[str, Any] = {"security": [{}]}


def is_loopback_host(host: str | None) -> bool:
    if not host:
        return False
    if host.lower() in LOOPBACK_NAMES or host.lower().endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def bearer_asker(session: Session, settings: Settings, token: str) -> Asker:
    """The asker a bearer token stands for: an operator, a read token's holder, or a refusal.

    The admin token is an operator; a read token reads its repositories; any other is refused (a program
    that sent a wrong token wants to be told, not to be served as nobody).
    """
    if is_admin_token(settings, token):
        return Asker(operator=True)
    row = find_read_token(session, token)
    if row is None:
        raise HTTPException(status.HTTP_401_UNAUTHORIZED, detail="unknown, revoked or malformed token",
                            headers={"WWW-Authenticate": "Bearer"})
    return Asker(token_repositories=frozenset(name.lower() for name in row.repositories))


def asker_of(request: Request, session: Session, settings: Settings, bearer: str | None) -> Asker:
    if bearer is not None:
        return bearer_asker(session, settings, bearer)
    if settings.read_access == "local" and is_loopback_host(request.url.hostname):
        return Asker(operator=True)
    user = signed_in(request, settings)
    if user is None:
        return ANONYMOUS
    login, token = user
    operators = {name.lower() for name in settings.operators}
    return Asker(operator=login.lower() in operators, login=login, github_token=token)


def github_views(request: Request) -> GitHubViews:
    return request.app.state.github_views


class Access:
    """The read decision for this request's asker, with the lookups routes make through it."""

    def __init__(self, decision: ReadDecision, session: Session) -> None:
        self.decision, self._session = decision, session

    @property
    def asker(self) -> Asker:
        return self.decision.asker

    def run(self, run_id: int) -> Run:
        """The run, or 404 — also for a run the asker may not read, which must not tell it exists."""
        run = self._session.get(Run, run_id)
        if run is None or not self.decision.may_read(run.repository):
            raise HTTPException(status.HTTP_404_NOT_FOUND, detail=f"run {run_id} not found")
        return run

    def visible(self) -> Visible:
        return self.decision.visible(self._session)

    def require_operator(self) -> None:
        if self.asker.operator:
            return
        if self.asker.anonymous:
            raise HTTPException(status.HTTP_401_UNAUTHORIZED, detail="this needs an operator: sign in, or send "
                                "'Authorization: Bearer <GRADCI_API_TOKEN>'", headers={"WWW-Authenticate": "Bearer"})
        raise HTTPException(status.HTTP_403_FORBIDDEN, detail="this needs an operator (GRADCI_OPERATORS)")


def read_access(request: Request, session: ReadSession, settings: SettingsDep,
                credentials: BearerCredentials) -> Access:
    """The access of this request's asker: the one dependency of every read route."""
    asker = asker_of(request, session, settings, credentials.credentials if credentials is not None else None)
    service_token = settings.github_token.get_secret_value() if settings.github_token else None
    return Access(ReadDecision(asker, settings.read_access, github_views(request), service_token), session)


ReadAccess = Annotated[Access, Depends(read_access)]


def operator_access(access: ReadAccess) -> Access:
    access.require_operator()
    return access


OperatorAccess = Annotated[Access, Depends(operator_access)]
