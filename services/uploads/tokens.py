"""Upload tokens: bearer tokens that may upload the results of one repository.

They are kept as ``services/db/bearer_tokens.py`` keeps every kind: hashed, shown once.
"""
from __future__ import annotations

from sqlalchemy.orm import Session

from gradci.services.db.bearer_tokens import BearerTokens, token_hash
from gradci.services.db.models import UploadToken
from gradci.services.repo_refs import FULL_NAME

UPLOAD_TOKENS = BearerTokens(UploadToken, "gradci_")
__all__ = ["create_token", "find_token", "is_upload_token", "list_tokens", "revoke_token", "token_hash"]


def is_upload_token(token: str) -> bool:
    """Shaped like an upload token (an OIDC id token is a JWT: three dot-separated parts)."""
    return UPLOAD_TOKENS.is_shaped(token) and "." not in token


def create_token(session: Session, full_name: str) -> tuple[UploadToken, str]:
    """A new token for ``full_name`` (owner/name): its row, and the token, which nothing stores."""
    if not FULL_NAME.match(full_name):
        raise ValueError(f"{full_name!r} is not a GitHub repository's owner/name")
    return UPLOAD_TOKENS.issue(session, full_name=full_name)


def find_token(session: Session, token: str) -> UploadToken | None:
    """The unrevoked token row ``token`` is, or None."""
    return UPLOAD_TOKENS.find(session, token) if is_upload_token(token) else None


def list_tokens(session: Session) -> list[UploadToken]:
    return UPLOAD_TOKENS.all(session)


def revoke_token(session: Session, token_id: int) -> UploadToken | None:
    return UPLOAD_TOKENS.revoke(session, token_id)
