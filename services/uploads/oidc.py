"""OIDC id tokens, as GitHub Actions mints them, verified against the keys the issuer publishes.

GitHub Actions mints them for a workflow with ``permissions: id-token: write``; the keys are found
through the issuer's ``/.well-known/openid-configuration``.

A token is accepted when it is signed (RS256) by one of the issuer's current keys, names this
server as its audience, comes from the configured issuer exactly, is within its validity window,
and carries the claims an upload is bound by: ``repository`` (owner/name) and ``repository_id``, the
repository it may upload for, and ``sha``, the commit its workflow ran for. The issuer and
its key set must be served over https; plain http is allowed on loopback only, for tests.
"""
from __future__ import annotations

import ipaddress
import threading
import time
from typing import Any
from urllib.parse import urlsplit

import httpx
import jwt

ALGORITHMS = ["RS256"]  # what GitHub signs with; "none" and HMAC algorithms can never pass
LEEWAY_S = 30  # clock drift between the runner, GitHub and this server
REQUIRED_CLAIMS = ["iss", "aud", "exp", "iat", "repository", "repository_id", "sha"]
DISCOVERY_TTL_S = 3600.0
FETCH_TIMEOUT_S = 10.0
LOOPBACK_NAMES = ("localhost",)


class IdTokenRefused(Exception):
    """The token is not one this server accepts (signature, audience, issuer, time, claims): 401."""


class IssuerUnavailable(Exception):
    """The issuer's configuration or keys could not be fetched: try again later (503)."""


def on_loopback(url: str) -> bool:
    host = urlsplit(url).hostname or ""
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def secure_url(url: str) -> bool:
    """https, or plain http to this machine (tests): a key set fetched in the clear could be anyone's."""
    scheme = urlsplit(url).scheme
    return scheme == "https" or (scheme == "http" and on_loopback(url))


class Issuer:
    """One issuer's published keys.

    Its discovery document is read again every ``DISCOVERY_TTL_S``, its key set is cached by PyJWT's
    ``PyJWKClient`` and fetched again when a token names a key it does not have (a rotation).
    """

    def __init__(self, issuer: str) -> None:
        if not secure_url(issuer):
            raise IssuerUnavailable(f"OIDC issuer {issuer!r} must be https (plain http only on loopback)")
        self.issuer = issuer
        self._keys: jwt.PyJWKClient | None = None
        self._discovered_at = 0.0
        self._lock = threading.Lock()

    def _discover(self) -> jwt.PyJWKClient:
        url = self.issuer.rstrip("/") + "/.well-known/openid-configuration"
        try:
            response = httpx.get(url, timeout=FETCH_TIMEOUT_S, follow_redirects=False)
            response.raise_for_status()
            document = response.json()
        except (httpx.HTTPError, ValueError) as exc:
            raise IssuerUnavailable(f"cannot read {url}: {exc}") from None
        named = document.get("issuer") if isinstance(document, dict) else None
        if named != self.issuer:
            raise IssuerUnavailable(f"{url} names issuer {named!r}, not {self.issuer!r}")
        jwks_uri = document.get("jwks_uri")
        if not isinstance(jwks_uri, str) or not secure_url(jwks_uri):
            raise IssuerUnavailable(f"{url}: jwks_uri {jwks_uri!r} is not an https URL")
        return jwt.PyJWKClient(jwks_uri, cache_jwk_set=True, lifespan=300, timeout=FETCH_TIMEOUT_S)

    def keys(self) -> jwt.PyJWKClient:
        with self._lock:
            if self._keys is None or time.monotonic() - self._discovered_at > DISCOVERY_TTL_S:
                self._keys, self._discovered_at = self._discover(), time.monotonic()
            return self._keys

    def verify(self, token: str, audience: str) -> dict[str, Any]:
        """The token's claims; raises ``IdTokenRefused`` or ``IssuerUnavailable``."""
        try:
            signing_key = self.keys().get_signing_key_from_jwt(token)
        except jwt.PyJWKClientConnectionError as exc:
            raise IssuerUnavailable(f"cannot fetch the keys of {self.issuer}: {exc}") from None
        except (jwt.PyJWKClientError, jwt.PyJWKError, jwt.DecodeError) as exc:
            raise IdTokenRefused(f"id token: {exc}") from None
        try:
            claims = jwt.decode(token, signing_key.key, algorithms=ALGORITHMS, audience=audience,
                                issuer=self.issuer, leeway=LEEWAY_S, options={"require": REQUIRED_CLAIMS})
        except jwt.InvalidTokenError as exc:
            raise IdTokenRefused(f"id token: {exc}") from None
        if not isinstance(claims.get("repository"), str):
            raise IdTokenRefused("id token: its repository claim is not owner/name")
        return claims


_issuers: dict[str, Issuer] = {}
_issuers_lock = threading.Lock()


def issuer(url: str) -> Issuer:
    """The process's one ``Issuer`` of ``url`` (its keys cached between requests)."""
    with _issuers_lock:
        if url not in _issuers:
            _issuers[url] = Issuer(url)
        return _issuers[url]
