"""gradci as a GitHub App: the App's JWT, and the installation access tokens it is exchanged for.

A JWT signed with the App's private key (RS256) proves the App itself; it is exchanged for an
installation's access token (``POST /app/installations/{id}/access_tokens``), which every call about
that installation's repositories carries, and which is kept until shortly before it expires (an
hour, as GitHub issues them) instead of being asked for on every report.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import datetime

import jwt

from gradci.services.github.client import GitHubClient, GitHubError
from gradci.services.settings import Settings

# GitHub refuses an App JWT that lives longer than 10 minutes; it is backdated a minute because
# GitHub's clock and ours may differ (its documentation's own advice).
JWT_LIFETIME_S = 540
JWT_BACKDATE_S = 60
# An installation token is renewed this long before it expires: a report must not be sent with a
# token that lapses on the way.
TOKEN_RENEWAL_MARGIN_S = 300


def app_jwt(app_id: int, private_key_pem: str, now: float | None = None) -> str:
    """The App's own credential: ``iss`` the App id, signed RS256 with its private key."""
    issued = int(now if now is not None else time.time()) - JWT_BACKDATE_S
    claims = {"iat": issued, "exp": issued + JWT_BACKDATE_S + JWT_LIFETIME_S, "iss": str(app_id)}
    return jwt.encode(claims, private_key_pem, algorithm="RS256")


class InstallationTokens:
    """Installation access tokens by (API, App, installation), shared by the threads of a process."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        # ``clock`` decides when a kept token is due for renewal (tests move it); the JWT always
        # carries the real time, which GitHub checks.
        self._tokens: dict[tuple[str, int, int], tuple[str, float]] = {}
        self._lock = threading.Lock()
        self._clock = clock

    def token(self, settings: Settings, installation_id: int) -> str:
        assert settings.github_app_id is not None, "App mode: GRADCI_GITHUB_APP_ID is set"
        key = (settings.github_api_url, settings.github_app_id, installation_id)
        with self._lock:
            token, expires = self._tokens.get(key, ("", 0.0))
            if token and self._clock() < expires - TOKEN_RENEWAL_MARGIN_S:
                return token
            token, expires = self._exchange(settings, installation_id)
            self._tokens[key] = (token, expires)
            return token

    def forget(self, settings: Settings, installation_id: int) -> None:
        """Drop a token GitHub refused (revoked, or the installation suspended): the next call asks anew."""
        assert settings.github_app_id is not None
        with self._lock:
            self._tokens.pop((settings.github_api_url, settings.github_app_id, installation_id), None)

    def _exchange(self, settings: Settings, installation_id: int) -> tuple[str, float]:
        assert settings.github_app_id is not None
        credential = app_jwt(settings.github_app_id, settings.github_app_key())
        with GitHubClient(settings.github_api_url, credential) as app:
            answer = app.request("POST", f"/app/installations/{installation_id}/access_tokens").json()
        try:
            expires = datetime.fromisoformat(answer["expires_at"].replace("Z", "+00:00")).timestamp()
            return answer["token"], expires
        except (KeyError, TypeError, ValueError) as exc:
            raise GitHubError(f"POST /app/installations/{installation_id}/access_tokens answered no token: "
                              f"{str(answer)[:200]}") from exc


installation_tokens = InstallationTokens()


def installation_of(settings: Settings, full_name: str) -> int:
    """The installation of gradci's App on ``full_name``, asked of GitHub with the App's JWT.

    The question is ``GET /repos/{owner}/{repo}/installation``: for a repository no webhook has named
    one yet (an upload's, or one installed before gradci was).
    """
    assert settings.github_app_id is not None
    with GitHubClient(settings.github_api_url, app_jwt(settings.github_app_id, settings.github_app_key())) as app:
        try:
            return int(app.request("GET", f"/repos/{full_name}/installation").json()["id"])
        except GitHubError as exc:
            if exc.status_code == 404:
                raise GitHubError(f"gradci's GitHub App is not installed on {full_name}: install it there "
                                  "(App mode reports through the App's installation)", 404) from None
            raise


def client_for(settings: Settings, installation_id: int | None, full_name: str) -> GitHubClient:
    """The client a report about ``full_name`` is sent with.

    The installation's token in App mode (the installation looked up when no webhook named it), the
    configured token otherwise.
    """
    if settings.github_app_mode:
        installation = installation_id if installation_id is not None else installation_of(settings, full_name)
        return GitHubClient(settings.github_api_url, installation_tokens.token(settings, installation))
    token = settings.github_token.get_secret_value() if settings.github_token else None
    return GitHubClient(settings.github_api_url, token)
