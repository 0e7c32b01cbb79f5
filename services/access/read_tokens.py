"""Read tokens: bearer tokens that may read the runs of some repositories.

They serve programs, and the badge of a private repository, which a README can only name in its URL.

Made and kept as every bearer token is (``services/db/bearer_tokens.py``: hashed, shown once), behind
a marker of their own.
"""
from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy.orm import Session

from gradci.services.db.bearer_tokens import BearerTokens
from gradci.services.db.models import ReadToken
from gradci.services.repo_refs import FULL_NAME

READ_TOKENS = BearerTokens(ReadToken, "gradci_read_")


def create_read_token(session: Session, repositories: Sequence[str]) -> tuple[ReadToken, str]:
    """A new token reading ``repositories`` (owner/names): its row, and the token, which nothing stores."""
    if not repositories:
        raise ValueError("a read token reads at least one repository (owner/name)")
    for full_name in repositories:
        if not FULL_NAME.match(full_name):
            raise ValueError(f"{full_name!r} is not a GitHub repository's owner/name")
    return READ_TOKENS.issue(session, repositories=sorted(set(repositories)))


def find_read_token(session: Session, token: str) -> ReadToken | None:
    """The unrevoked read token ``token`` is, or None."""
    return READ_TOKENS.find(session, token)


def list_read_tokens(session: Session) -> list[ReadToken]:
    return READ_TOKENS.all(session)


def revoke_read_token(session: Session, token_id: int) -> ReadToken | None:
    return READ_TOKENS.revoke(session, token_id)
