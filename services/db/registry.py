"""The repositories the operator registered with ``gradci repos add``.

They are the service's door for what anyone can send (an App installation's pull requests, an OIDC
id token of any repository).

Functions flush but never commit: the caller owns the transaction.
"""
from __future__ import annotations

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from gradci.services.db.models import RegisteredRepository, utcnow
from gradci.services.repo_refs import FULL_NAME


def _checked(full_name: str) -> str:
    if not FULL_NAME.match(full_name):
        raise ValueError(f"{full_name!r} is not a GitHub repository's owner/name")
    return full_name.lower()  # GitHub's names ignore case


def register(session: Session, full_name: str) -> bool:
    """Register ``full_name`` (owner/name); False when it already was."""
    name = _checked(full_name)
    if session.scalar(select(RegisteredRepository.id).where(RegisteredRepository.full_name == name)) is not None:
        return False
    session.add(RegisteredRepository(full_name=name, added_at=utcnow()))
    session.flush()
    return True


def unregister(session: Session, full_name: str) -> bool:
    """Forget ``full_name``; False when it was not registered."""
    gone = session.execute(delete(RegisteredRepository)
                           .where(RegisteredRepository.full_name == _checked(full_name)))
    return bool(gone.rowcount)  # type: ignore[attr-defined]  # a DML statement's result is a CursorResult


def registered(session: Session) -> list[RegisteredRepository]:
    return list(session.scalars(select(RegisteredRepository).order_by(RegisteredRepository.full_name)))


def registered_names(session: Session) -> frozenset[str]:
    """The registered owner/names, lower-cased: what ``events.repository_registered`` takes."""
    return frozenset(session.scalars(select(RegisteredRepository.full_name)))
