"""Sign in with GitHub, and sign out.

``/login`` sends the browser to GitHub's authorize page, ``/login/callback`` takes the code back,
exchanges it for the user's token and asks GitHub who they are, ``/logout`` ends the session. The
OAuth web flow itself (state, code exchange, errors) is Authlib's Starlette client; an OAuth App's
credentials, or in App mode the GitHub App's own client id and secret.

What the user may read is then asked of GitHub with their token (``services/access``), never
decided here.
"""
from __future__ import annotations

from typing import Annotated

from authlib.integrations.starlette_client import OAuth, OAuthError, StarletteOAuth2App
from fastapi import APIRouter, FastAPI, Form, HTTPException, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse
from httpx import HTTPError

from gradci.services.api.sessions import csrf_matches, sign_in, sign_out
from gradci.services.settings import Settings

router = APIRouter(include_in_schema=False)
NEXT_KEY = "login_next"


def install_login(app: FastAPI, settings: Settings) -> None:
    oauth = OAuth()
    if settings.login_configured:
        web, api = settings.github_web_url.rstrip("/"), settings.github_api_url.rstrip("/")
        oauth.register("github", client_id=settings.github_oauth_client_id,
                       client_secret=settings.github_oauth_client_secret.get_secret_value(),  # type: ignore[union-attr]  # login_configured says it is set
                       authorize_url=f"{web}/login/oauth/authorize", access_token_url=f"{web}/login/oauth/access_token",
                       api_base_url=f"{api}/", client_kwargs={"scope": settings.github_oauth_scope})
    app.state.oauth = oauth
    app.include_router(router)


def github(request: Request) -> StarletteOAuth2App:
    client = request.app.state.oauth.create_client("github")
    if client is None:
        raise HTTPException(404, detail="signing in is not configured on this server (GRADCI_GITHUB_OAUTH_CLIENT_ID)")
    return client


def local_path(target: str | None) -> str:
    """Where to go after signing in: a path of this site, never another site (``//evil``, ``/\\evil``)."""
    if not target or not target.startswith("/") or target.startswith(("//", "/\\")) or any(c in target for c in "\r\n"):
        return "/"
    return target


def callback_url(request: Request) -> str:
    settings: Settings = request.app.state.settings
    if settings.public_url:
        return f"{settings.public_url.rstrip('/')}/login/callback"
    return str(request.url_for("login_callback"))


@router.get("/login")
async def login(request: Request, next: Annotated[str | None, Query(max_length=2048)] = None):
    client = github(request)
    request.session[NEXT_KEY] = local_path(next)
    return await client.authorize_redirect(request, callback_url(request))


@router.get("/login/callback", name="login_callback")
async def login_callback(request: Request):
    client = github(request)
    target = local_path(request.session.get(NEXT_KEY))
    try:
        token = await client.authorize_access_token(request)
        user = (await client.get("user", token=token)).raise_for_status().json()
    except (OAuthError, HTTPError) as exc:
        return HTMLResponse(f"<p>Signing in with GitHub failed: {type(exc).__name__}. "
                            f'<a href="/login">Try again</a>.</p>', status_code=400)
    sign_in(request, request.app.state.settings, user["login"], token["access_token"])
    return RedirectResponse(target, status_code=303)


@router.post("/logout")
async def logout(request: Request, csrf: Annotated[str, Form(max_length=100)] = ""):
    # A forged sign-out is a nuisance, not a breach; refused all the same, as every dashboard form is.
    if not csrf_matches(request, csrf):
        raise HTTPException(403, detail="this form is not from this site's page (CSRF token missing or wrong)")
    sign_out(request)
    return RedirectResponse("/", status_code=303)
