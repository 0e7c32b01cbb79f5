"""The dashboard's session, in Starlette's signed cookie.

The cookie holds who signed in (their GitHub login and their OAuth token, encrypted) and the CSRF
token of the dashboard's forms.

The cookie is signed (itsdangerous), not secret: its content is base64 the browser can read. The
user's token is therefore encrypted (Fernet) with a key derived from the session secret, so that
neither a response nor a copied cookie's plain text shows a credential.
"""
from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from urllib.parse import urlsplit

from cryptography.fernet import Fernet, InvalidToken
from fastapi import FastAPI, Request
from starlette.middleware.sessions import SessionMiddleware

from gradci.services.settings import Settings

SESSION_COOKIE = "gradci_session"
SESSION_MAX_AGE_S = 8 * 3600  # a day's work; GitHub's answers are asked again long before
# Without GRADCI_SESSION_SECRET or an API token: a key of this process (sessions end with it).
_PROCESS_KEY = secrets.token_hex(32)


def session_key(settings: Settings) -> str:
    """The key that signs the session cookie.

    GRADCI_SESSION_SECRET; else one derived from the API token, so that every API process of a
    deployment signs alike with no setting more.
    """
    if settings.session_secret is not None:
        return settings.session_secret.get_secret_value()
    if settings.api_token is not None:
        return hmac.new(settings.api_token.get_secret_value().encode(), b"gradci session cookie",
                        hashlib.sha256).hexdigest()
    return _PROCESS_KEY


def install_sessions(app: FastAPI, settings: Settings) -> None:
    # SameSite=Lax: a cross-site form POST arrives without the cookie, a link from elsewhere with it.
    app.add_middleware(SessionMiddleware, secret_key=session_key(settings), session_cookie=SESSION_COOKIE,
                       max_age=SESSION_MAX_AGE_S, same_site="lax",
                       https_only=(settings.public_url or "").startswith("https://"))


def _fernet(settings: Settings) -> Fernet:
    digest = hashlib.sha256(b"gradci oauth token\0" + session_key(settings).encode()).digest()
    return Fernet(base64.urlsafe_b64encode(digest))


def _session(request: Request) -> dict:
    # Apps without the middleware (none are made so, but a test may mount a router alone) have none.
    return request.session if "session" in request.scope else {}


def sign_in(request: Request, settings: Settings, login: str, token: str) -> None:
    session = _session(request)
    session.clear()  # a fresh session: nothing of the anonymous one (its CSRF token) is carried over
    session.update(login=login, github_token=_fernet(settings).encrypt(token.encode()).decode())


def sign_out(request: Request) -> None:
    _session(request).clear()


def signed_in(request: Request, settings: Settings) -> tuple[str, str] | None:
    """(login, OAuth token) of the signed-in user, or None."""
    session = _session(request)
    login, sealed = session.get("login"), session.get("github_token")
    if not isinstance(login, str) or not isinstance(sealed, str):
        return None
    try:
        return login, _fernet(settings).decrypt(sealed.encode()).decode()
    except InvalidToken:  # sealed under another secret: the session is over
        return None


def signed_in_login(request: Request) -> str | None:
    """The login the page shows as signed in (the token is checked when it is used)."""
    login = _session(request).get("login")
    return login if isinstance(login, str) else None


def csrf_token(request: Request) -> str:
    """The session's CSRF token, which the dashboard's forms carry back."""
    session = _session(request)
    if not isinstance(session.get("csrf"), str):
        session["csrf"] = secrets.token_urlsafe(32)
    return session["csrf"]


def csrf_matches(request: Request, given: str | None) -> bool:
    expected = _session(request).get("csrf")
    return isinstance(expected, str) and isinstance(given, str) and hmac.compare_digest(given, expected)


def cross_site(request: Request) -> bool:
    """Whether the browser says the request comes from another site.

    It says so with ``Sec-Fetch-Site`` (cross-site or same-site: another origin), or with an ``Origin``
    that is not this server's. Programs send neither.
    """
    if request.headers.get("sec-fetch-site", "same-origin") not in ("same-origin", "none"):
        return True
    origin = request.headers.get("origin")
    if origin is None:
        return False
    public_url = urlsplit(request.app.state.settings.public_url or "")  # behind a proxy, the address people use
    ours = {f"{request.url.scheme}://{request.url.netloc}", f"{public_url.scheme}://{public_url.netloc}"}
    return origin.rstrip("/") not in ours
