"""Bearer tokens kept as hashes: made, found, listed and revoked the same way for every kind.

A token is 32 random bytes (``secrets.token_urlsafe``) behind a marker of its kind. Only its SHA-256
is stored — a high-entropy token needs no slow hash, since it cannot be guessed from a dictionary —
and its first characters, which find the row and tell tokens apart in ``gradci tokens list``; the
hashes are compared in constant time. The token itself is shown once, when it is made.

Functions flush but never commit: the caller owns the transaction.
"""
from __future__ import annotations

import hashlib
import hmac
import secrets
from typing import Any, Generic, TypeVar

from sqlalchemy import select
from sqlalchemy.orm import Session

from gradci.services.db.models import utcnow

Row = TypeVar("Row")
RANDOM_SHOWN = 7  # random characters stored after the marker: enough to find the row, too few to use


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class BearerTokens(Generic[Row]):
    """The bearer tokens of one kind, each starting with ``marker``.

    They are rows of ``model``, with ``id``, ``prefix``, ``token_hash``, ``created_at`` and
    ``revoked_at`` columns.
    """

    def __init__(self, model: type[Row], marker: str) -> None:
        self._model: Any = model  # its columns build queries; mypy knows them only on the concrete class
        self.marker = marker
        self.prefix_length = len(marker) + RANDOM_SHOWN

    def is_shaped(self, token: str) -> bool:
        return token.startswith(self.marker)

    def issue(self, session: Session, **fields: Any) -> tuple[Row, str]:
        """A new token with ``fields``: its row, and the token, which nothing stores."""
        token = self.marker + secrets.token_urlsafe(32)
        row = self._model(prefix=token[:self.prefix_length], token_hash=token_hash(token), created_at=utcnow(),
                          **fields)
        session.add(row)
        session.flush()
        return row, token

    def find(self, session: Session, token: str) -> Row | None:
        """The unrevoked row ``token`` is, or None."""
        if not self.is_shaped(token):
            return None
        digest = token_hash(token)
        candidates = session.scalars(select(self._model).where(self._model.prefix == token[:self.prefix_length],
                                                               self._model.revoked_at.is_(None)))
        return next((row for row in candidates if hmac.compare_digest(row.token_hash, digest)), None)

    def all(self, session: Session) -> list[Row]:
        return list(session.scalars(select(self._model).order_by(self._model.id)))

    def revoke(self, session: Session, token_id: int) -> Row | None:
        """Revoke the token (a revoked token stays listed); None when there is no such token."""
        row = session.get(self._model, token_id)
        if row is not None and row.revoked_at is None:
            row.revoked_at = utcnow()
            session.flush()
        return row
