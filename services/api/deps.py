"""FastAPI dependencies: the app's settings, a database session per request, write authorisation."""
from __future__ import annotations

import secrets
from collections.abc import Iterator
from typing import Annotated

from fastapi import Depends, HTTPException, Request, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.orm import Session

from gradci.services.api.sessions import cross_site
from gradci.services.db.session import sessionmaker_for
from gradci.services.settings import Settings

_bearer = HTTPBearer(auto_error=False, description="GRADCI_API_TOKEN (writes, and reading everything), or a read "
                                                    "token (`gradci tokens create --read`: reading its repositories)")
BearerCredentials = Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]


# async: a plain attribute read; FastAPI would run a sync dependency in a worker thread.
async def app_settings(request: Request) -> Settings:
    return request.app.state.settings


SettingsDep = Annotated[Settings, Depends(app_settings)]


def read_session(settings: SettingsDep) -> Iterator[Session]:
    # Read-only: on SQLite it does not take the write lock the workers need (see db.session).
    with sessionmaker_for(settings.database_url, readonly=True)() as session:
        yield session


def write_session(settings: SettingsDep) -> Iterator[Session]:
    with sessionmaker_for(settings.database_url)() as session:
        yield session


ReadSession = Annotated[Session, Depends(read_session)]
WriteSession = Annotated[Session, Depends(write_session)]


def is_admin_token(settings: Settings, given: str) -> bool:
    """``given`` is GRADCI_API_TOKEN (never, when none is set)."""
    if settings.api_token is None:
        return False
    # Constant-time comparison: response timing must not reveal how much of a guess was right.
    return secrets.compare_digest(given.encode(), settings.api_token.get_secret_value().encode())


def require_write_token(request: Request, settings: SettingsDep, credentials: BearerCredentials) -> None:
    """Refuse a write that lacks the API token, or that a browser sends from another site.

    Writes need ``Authorization: Bearer <GRADCI_API_TOKEN>`` when a token is configured. Without one
    (``gradci api --no-auth``, on loopback), a write a browser sends from another site is refused: a
    page anywhere could otherwise post a form that cancels a run.
    """
    if settings.api_token is None:
        if cross_site(request):
            raise HTTPException(status.HTTP_403_FORBIDDEN, detail="a write from another site's page is refused")
        return
    if credentials is None or not is_admin_token(settings, credentials.credentials):
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED,
            detail="this request needs 'Authorization: Bearer <GRADCI_API_TOKEN>'",
            headers={"WWW-Authenticate": "Bearer"},
        )


WriteAccess = Depends(require_write_token)
