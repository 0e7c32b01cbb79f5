"""Upload tokens: bearer tokens that may upload the results of one repository.

A token is 32 random bytes (``secrets.token_urlsafe``) behind a recognisable prefix. Only its SHA-256
is stored — a high-entropy token needs no slow hash, since it cannot be guessed from a dictionary —
and its first characters, which find the row and tell tokens apart in ``gradci tokens list``; the
hashes are compared in constant time. The token itself is shown once, when it is made.

Functions flush but never commit: the caller owns the transaction.
"""
from __future__ import annotations

import hashlib
import hmac
import secrets

from sqlalchemy import select
from sqlalchemy.orm import Session

from gradci.services.api.repo_refs import FULL_NAME
from gradci.services.db.models import UploadToken, utcnow

TOKEN_PREFIX = "gradci_"
# The stored prefix: the marker and 7 random characters, to find the row and tell tokens apart.
PREFIX_LENGTH = len(TOKEN_PREFIX) + 7


def is_upload_token(token: str) -> bool:
    """Shaped like an upload token (an OIDC id token is a JWT: three dot-separated parts)."""
    return token.startswith(TOKEN_PREFIX) and "." not in token


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def create_token(session: Session, full_name: str) -> tuple[UploadToken, str]:
    """A new token for ``full_name`` (owner/name): its row, and the token, which nothing stores."""
    if not FULL_NAME.match(full_name):
        raise ValueError(f"{full_name!r} is not a GitHub repository's owner/name")
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    row = UploadToken(full_name=full_name, prefix=token[:PREFIX_LENGTH], token_hash=token_hash(token),
                      created_at=utcnow())
    session.add(row)
    session.flush()
    return row, token


def find_token(session: Session, token: str) -> UploadToken | None:
    """The unrevoked token row ``token`` is, or None."""
    if not is_upload_token(token):
        return None
    digest = token_hash(token)
    candidates = session.scalars(select(UploadToken).where(UploadToken.prefix == token[:PREFIX_LENGTH],
                                                           UploadToken.revoked_at.is_(None)))
    return next((row for row in candidates if hmac.compare_digest(row.token_hash, digest)), None)


def list_tokens(session: Session) -> list[UploadToken]:
    return list(session.scalars(select(UploadToken).order_by(UploadToken.id)))


def revoke_token(session: Session, token_id: int) -> UploadToken | None:
    """Revoke the token (a revoked token stays listed); None when there is no such token."""
    row = session.get(UploadToken, token_id)
    if row is not None and row.revoked_at is None:
        row.revoked_at = utcnow()
        session.flush()
    return row
