"""Who gradci is on GitHub: the login its comments carry.

With it gradci finds its own comment by its author as well as its hidden marker (anyone can copy the
marker into a comment of theirs).

In App mode that is the App's bot account, ``<slug>[bot]``, the slug read once with the App's JWT
(``GET /app``); otherwise the user the token belongs to (``GET /user``). Each is asked once per
process and kept: it changes only with the credential, which is part of the key.
"""
from __future__ import annotations

import hashlib
import threading

from gradci.services.github.app_auth import app_jwt
from gradci.services.github.client import GitHubClient, GitHubError
from gradci.services.settings import Settings

_logins: dict[tuple[str, str], str] = {}
_lock = threading.Lock()


def own_login(settings: Settings, client: GitHubClient) -> str:
    """gradci's login on ``settings.github_api_url``; ``client`` carries the configured token (token mode)."""
    key = (settings.github_api_url, _credential_key(settings))
    with _lock:
        if key not in _logins:
            _logins[key] = _app_login(settings) if settings.github_app_mode else _token_login(client)
        return _logins[key]


def _credential_key(settings: Settings) -> str:
    """The credential the login belongs to, as a digest: a token is not kept as a key in memory."""
    if settings.github_app_mode:
        return f"app:{settings.github_app_id}"
    token = settings.github_token.get_secret_value() if settings.github_token else ""
    return "token:" + hashlib.sha256(token.encode()).hexdigest()


def _app_login(settings: Settings) -> str:
    assert settings.github_app_id is not None, "App mode: GRADCI_GITHUB_APP_ID is set"
    with GitHubClient(settings.github_api_url, app_jwt(settings.github_app_id, settings.github_app_key())) as app:
        return f"{app.request('GET', '/app').json()['slug']}[bot]"


def _token_login(client: GitHubClient) -> str:
    try:
        return str(client.request("GET", "/user").json()["login"])
    except GitHubError as exc:
        if exc.status_code in (401, 403):
            # An installation or Actions token cannot say whose it is; without that, a stranger's
            # comment carrying the marker could be taken for gradci's.
            raise GitHubError("GRADCI_GITHUB_TOKEN cannot say whose it is (GET /user answered "
                              f"{exc.status_code}): gradci finds its pull-request comment by its own login; "
                              "use a personal access token of the account gradci comments as, or App mode",
                              exc.status_code) from None
        raise
