"""The webhook deliveries table.

A delivery is stored by the API in one statement, acted on once by a worker, and found again by the
reconciler when no worker acted on it (its message was lost, or never sent).

Functions never commit: the caller owns the transaction.
"""
from __future__ import annotations

from datetime import timedelta
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session, defer

from gradci.services.db.models import Delivery, utcnow
from gradci.services.db.upsert import dialect_insert


def store_delivery(session: Session, *, delivery_id: str, event: str, payload: dict[str, Any],
                   decision: dict[str, Any], subject: str | None) -> int | None:
    """Insert the delivery, unprocessed, and return its row id.

    None when one with this ``delivery_id`` is stored already (a redelivery or a replay; on PostgreSQL a
    concurrent insert of the same id waits for the first one's transaction). One statement, however many
    copies arrive at once.
    """
    insert = dialect_insert(session, Delivery.__table__)
    statement = insert.values(delivery_id=delivery_id, event=event, action=payload.get("action"), payload=payload,
                              decision=decision, subject=subject, received_at=utcnow())
    stored = session.scalar(statement.on_conflict_do_nothing(index_elements=["delivery_id"])
                            .returning(Delivery.id))
    return int(stored) if stored is not None else None


def subject_of(session: Session, delivery_id: int) -> tuple[bool, str | None]:
    """(whether the delivery is stored, the pull request it concerns)."""
    row = session.execute(select(Delivery.subject).where(Delivery.id == delivery_id)).one_or_none()
    return row is not None, row[0] if row is not None else None


def pending_deliveries(session: Session, delivery_id: int, subject: str | None) -> list[Delivery]:
    """The still unprocessed deliveries among this one and its pull request's earlier ones, oldest first.

    The earlier ones are those stored before it of the pull request it concerns (``subject``), if any.
    All are locked until the transaction ends (a second worker on one of them waits, then finds it
    processed). The caller serialises a subject's deliveries first (``lock_for_transaction``): this
    reads what the one before committed. Their payloads are not loaded: acting needs only the decision.
    """
    of_it = (Delivery.id == delivery_id if subject is None
             else (Delivery.subject == subject) & (Delivery.id <= delivery_id))
    statement = (select(Delivery).options(defer(Delivery.payload))
                 .where(of_it, Delivery.processed_at.is_(None)).order_by(Delivery.id).with_for_update())
    return list(session.scalars(statement))


def unhandled_deliveries(session: Session, *, grace_s: float, limit: int) -> list[int]:
    """Deliveries stored more than ``grace_s`` ago that no worker has acted on yet."""
    cutoff = utcnow() - timedelta(seconds=grace_s)
    return list(session.scalars(select(Delivery.id)
                                .where(Delivery.processed_at.is_(None), Delivery.received_at < cutoff)
                                .order_by(Delivery.id).limit(limit)))
