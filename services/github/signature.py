"""X-Hub-Signature-256: HMAC-SHA256 of the raw request body with the webhook secret.

A body is hashed while it streams in (``read_signed_body``), read with a bound
(``gradci.services.bodies``): until the signature matches, the bytes come from anyone.
"""
from __future__ import annotations

import hashlib
import hmac
import string
from collections.abc import AsyncIterable
from typing import IO

from gradci.services.bodies import PayloadTooLarge as PayloadTooLarge  # the webhook route catches it here
from gradci.services.bodies import read_bounded

PREFIX = "sha256="
_HEX_DIGITS = frozenset(string.hexdigits)
_DIGEST_HEX_LENGTH = hashlib.sha256().digest_size * 2


class BadSignature(Exception):
    """The header is missing, malformed, or does not match the body."""


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


async def read_signed_body(chunks: AsyncIterable[bytes], secret: str, header: str | None,
                           limit: int) -> IO[bytes]:
    """The verified body, rewound, in a spooled temporary file the caller closes.

    Raises ``PayloadTooLarge`` as soon as more than ``limit`` bytes arrived (the rest is never read) and
    ``BadSignature`` when the whole body does not match ``header``.
    """
    hasher = BodyHasher(secret)
    body = await read_bounded(chunks, limit, hasher.update)
    if not hasher.matches(header):
        body.close()
        raise BadSignature("X-Hub-Signature-256 does not match the body")
    return body
