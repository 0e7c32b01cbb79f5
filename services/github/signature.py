"""X-Hub-Signature-256: HMAC-SHA256 of the raw request body with the webhook secret.

A webhook's body is read once (``verified_body``): the header is checked before a byte is read, and
the body is hashed while it streams in through one bounded reader (``gradci.services.bodies``):
until the signature matches, the bytes come from anyone.
"""
from __future__ import annotations

import hashlib
import hmac
import string
from typing import IO

from fastapi import Request

from gradci.services.bodies import PayloadTooLarge, read_request_body

PREFIX = "sha256="
_HEX_DIGITS = frozenset(string.hexdigits)
_DIGEST_HEX_LENGTH = hashlib.sha256().digest_size * 2


class Refused(Exception):
    """Why a webhook's body is refused, with the HTTP status that says so."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status, self.detail = status, detail


BAD_SIGNATURE = "missing or invalid X-Hub-Signature-256"


def well_formed(header: str | None) -> bool:
    """``sha256=`` and 64 hex digits: anything else cannot match, so no body need be read for it."""
    if not header or not header.startswith(PREFIX):
        return False
    digest = header[len(PREFIX):]
    return len(digest) == _DIGEST_HEX_LENGTH and set(digest) <= _HEX_DIGITS


class BodyHasher:
    """The HMAC of a body fed to it chunk by chunk."""

    def __init__(self, secret: str) -> None:
        self._mac = hmac.new(secret.encode(), digestmod=hashlib.sha256)

    def update(self, chunk: bytes) -> None:
        self._mac.update(chunk)

    def signature(self) -> str:
        return PREFIX + self._mac.hexdigest()

    def matches(self, header: str | None) -> bool:
        """Constant-time comparison; a missing or malformed header never matches."""
        return header is not None and well_formed(header) and hmac.compare_digest(self.signature(), header.lower())


def sign(secret: str, body: bytes) -> str:
    hasher = BodyHasher(secret)
    hasher.update(body)
    return hasher.signature()


def verify(secret: str, body: bytes, header: str | None) -> bool:
    hasher = BodyHasher(secret)
    hasher.update(body)
    return hasher.matches(header)


async def verified_body(request: Request, secret: str, limit: int) -> IO[bytes]:
    """The request's body, once its signature matches: rewound, in a spooled file the caller closes.

    Raises ``Refused``: 401 for a missing or malformed header (before a byte is read) and for a body
    that does not match it, 413 for a body over ``limit`` bytes (declared, or as soon as it streamed
    past it: the rest is never read).
    """
    header = request.headers.get("x-hub-signature-256")
    if not well_formed(header):
        raise Refused(401, BAD_SIGNATURE)
    hasher = BodyHasher(secret)
    try:
        body = await read_request_body(request, limit, hasher.update)
    except PayloadTooLarge as exc:
        raise Refused(413, str(exc)) from None
    if not hasher.matches(header):
        body.close()
        raise Refused(401, BAD_SIGNATURE)
    return body
