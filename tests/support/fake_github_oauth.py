"""GitHub's side of "Sign in with GitHub", as GitHub documents its OAuth web application flow, for
the fake GitHub (``tests.support.fake_github``): people, the repositories each may read, and the
OAuth App gradci signs in with.

- ``GET /login/oauth/authorize?client_id&redirect_uri&state&scope[&login]``: GitHub's sign-in and
  authorize page: a form asking who signs in (``login`` pre-fills it), whose ``POST`` redirects to
  ``redirect_uri?code=…&state=…`` (a code lives 10 minutes and is used once);
- ``POST /login/oauth/access_token`` (client_id, client_secret in the body or as HTTP Basic, code,
  redirect_uri): ``{"access_token", "token_type": "bearer", "scope"}`` as JSON when asked for, form
  encoded otherwise; a bad code is a 200 ``{"error": "bad_verification_code"}``, as GitHub answers;
- ``GET /user`` with a user's token: who it is (401 for a token GitHub never issued or revoked);
- ``GET /repos/{owner}/{repo}``: with a user's token, 200 with ``private`` and the user's
  ``permissions`` when they may read it, 404 when not (GitHub does not say a private repository
  exists); with no token, 200 for public repositories only; with another (the service's) token, 200.
"""
from __future__ import annotations

import base64
import dataclasses
import html
import secrets
import time
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlparse

from tests.support.json_server import Reply

CODE_LIFETIME_S = 600


@dataclasses.dataclass
class FakeRepository:
    full_name: str
    private: bool
    readers: set[str] = dataclasses.field(default_factory=set)
    writers: set[str] = dataclasses.field(default_factory=set)

    def permissions(self, login: str) -> dict[str, bool] | None:
        """The user's permissions, or None when they may not read it."""
        if login in self.writers:
            return {"admin": False, "maintain": False, "push": True, "triage": True, "pull": True}
        if login in self.readers or not self.private:
            return {"admin": False, "maintain": False, "push": False, "triage": False, "pull": True}
        return None

    def answer(self, permissions: dict[str, bool] | None) -> dict[str, Any]:
        owner, name = self.full_name.split("/")
        body: dict[str, Any] = {"id": abs(hash(self.full_name)) % 10**8, "full_name": self.full_name, "name": name,
                                "owner": {"login": owner}, "private": self.private,
                                "visibility": "private" if self.private else "public"}
        if permissions is not None:
            body["permissions"] = permissions
        return body


class GitHubAccounts:
    """People, repositories and one OAuth App; ``answer_account`` serves the calls above (None: not
    one of them, for the fake's other handlers)."""

    def __init__(self) -> None:
        self.users: dict[str, int] = {}                      # login -> id
        self.repositories: dict[str, FakeRepository] = {}    # lower-cased owner/name -> repository
        self.oauth_client: tuple[str, str] | None = None     # (client id, client secret)
        self.codes: dict[str, tuple[str, str, float]] = {}   # code -> (login, redirect_uri, expiry)
        self.user_tokens: dict[str, str] = {}                # token -> login
        self.repository_lookups: list[tuple[str, str | None]] = []  # (owner/name, login or None) asked

    def add_oauth_app(self) -> tuple[str, str]:
        """Register gradci's OAuth App: its (client id, client secret)."""
        self.oauth_client = (f"Iv1.{secrets.token_hex(8)}", secrets.token_hex(20))
        return self.oauth_client

    def add_user(self, login: str) -> None:
        self.users.setdefault(login, 5000 + len(self.users))

    def add_repository(self, full_name: str, *, private: bool, readers: tuple[str, ...] = (),
                       writers: tuple[str, ...] = ()) -> None:
        for login in (*readers, *writers):
            self.add_user(login)
        self.repositories[full_name.lower()] = FakeRepository(full_name, private, set(readers), set(writers))

    def token_for(self, login: str) -> str:
        """A user token as the web flow would issue it (for tests that do not drive the flow)."""
        self.add_user(login)
        token = f"gho_{secrets.token_urlsafe(24)}"
        self.user_tokens[token] = login
        return token

    def answer_account(self, method: str, path: str, body: Any, headers: dict[str, str]) -> tuple[int, Any] | None:
        url = urlparse(path)
        parts = url.path.strip("/").split("/")
        query = dict(parse_qsl(url.query))
        credential = _bearer(headers)
        if parts[:2] == ["login", "oauth"] and len(parts) == 3:
            if parts[2] == "authorize":
                return self._authorize(method, query if method == "GET" else (body or {}))
            if parts[2] == "access_token" and method == "POST":
                return self._access_token(body or {}, headers)
        if method == "GET" and parts == ["user"] and (credential in self.user_tokens or credential.startswith("gho_")):
            login = self.user_tokens.get(credential)
            if login is None:
                return 401, {"message": "Bad credentials"}
            return 200, {"login": login, "id": self.users[login], "type": "User", "name": login.title()}
        if method == "GET" and len(parts) == 3 and parts[0] == "repos":
            return self._repository(f"{parts[1]}/{parts[2]}", credential)
        return None

    def _authorize(self, method: str, params: dict[str, str]) -> tuple[int, Any]:
        if self.oauth_client is None or params.get("client_id") != self.oauth_client[0]:
            return 404, Reply(b"<h1>404: no such OAuth application</h1>")
        redirect_uri = params.get("redirect_uri", "")
        if method == "POST":
            login = params.get("login", "")
            if login not in self.users:
                return 200, Reply(self._page(params, error=f"Incorrect username {login!r}.").encode())
            code = secrets.token_hex(10)
            self.codes[code] = (login, redirect_uri, time.time() + CODE_LIFETIME_S)
            back = f"{redirect_uri}{'&' if '?' in redirect_uri else '?'}{urlencode({'code': code, 'state': params.get('state', '')})}"
            return 302, Reply(headers={"Location": back})
        return 200, Reply(self._page(params).encode())

    def _page(self, params: dict[str, str], error: str = "") -> str:
        hidden = "".join(f'<input type="hidden" name="{html.escape(name)}" value="{html.escape(params.get(name, ""))}">'
                         for name in ("client_id", "redirect_uri", "state", "scope"))
        return f"""<!doctype html><html><head><meta charset="utf-8"><title>Authorize application</title></head>
<body style="font-family: sans-serif; max-width: 32em; margin: 3em auto">
<h1>Sign in to GitHub (fake)</h1><p>to continue to <strong>gradci</strong>, which asks for
<code>{html.escape(params.get('scope', '') or 'no scope')}</code>.</p>
{f'<p id="error" style="color: #b71c1c">{html.escape(error)}</p>' if error else ''}
<form method="post" action="/login/oauth/authorize">{hidden}
<label>Username <input id="login_field" name="login" value="{html.escape(params.get('login', ''))}"></label>
<button id="authorize" type="submit">Authorize gradci</button></form></body></html>"""

    def _access_token(self, body: dict[str, str], headers: dict[str, str]) -> tuple[int, Any]:
        client_id, client_secret = body.get("client_id"), body.get("client_secret")
        basic = headers.get("Authorization", "")
        if basic.startswith("Basic "):
            client_id, _, client_secret = base64.b64decode(basic[6:]).decode().partition(":")
        if self.oauth_client is None or (client_id, client_secret) != self.oauth_client:
            return 200, {"error": "incorrect_client_credentials",
                         "error_description": "The client_id and/or client_secret passed are incorrect."}
        login, redirect_uri, expires = self.codes.pop(body.get("code", ""), ("", "", 0.0))
        if not login or expires < time.time() or body.get("redirect_uri", redirect_uri) != redirect_uri:
            return 200, {"error": "bad_verification_code",
                         "error_description": "The code passed is incorrect or expired."}
        token = self.token_for(login)
        answer = {"access_token": token, "token_type": "bearer", "scope": "repo"}
        if "application/json" in headers.get("Accept", ""):
            return 200, answer
        return 200, Reply(urlencode(answer).encode(), "application/x-www-form-urlencoded")

    def _repository(self, full_name: str, credential: str) -> tuple[int, Any] | None:
        repository = self.repositories.get(full_name.lower())
        login = self.user_tokens.get(credential)
        if credential and login is None and not credential.startswith("gho_"):
            # Another credential (the service's token): what the service's own client sees.
            return (200, repository.answer(None)) if repository is not None else None
        self.repository_lookups.append((full_name, login))
        if credential and login is None:
            return 401, {"message": "Bad credentials"}
        if repository is None:
            return 404, {"message": "Not Found"}
        permissions = repository.permissions(login) if login else (None if repository.private else {})
        if permissions is None:
            return 404, {"message": "Not Found"}
        return 200, repository.answer(permissions or None)


def _bearer(headers: dict[str, str]) -> str:
    value = headers.get("Authorization") or ""
    for scheme in ("Bearer ", "bearer ", "token "):
        if value.startswith(scheme):
            return value[len(scheme):].strip()
    return ""
