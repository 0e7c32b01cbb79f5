"""Keyset ("cursor") pagination over an integer id: pages stay stable while rows are inserted,
and a page costs an index seek however deep it is, unlike OFFSET."""
from __future__ import annotations

import base64
import binascii
import dataclasses
from typing import Any, Generic, TypeVar

from sqlalchemy import Select
from sqlalchemy.orm import Session

T = TypeVar("T")
_PREFIX = "id:"
MAX_ID = 2**63 - 1


class InvalidCursor(ValueError):
    """A cursor this service did not issue; the API answers 400."""


@dataclasses.dataclass
class Page(Generic[T]):
    items: list[T]
    next_cursor: str | None


def encode_cursor(last_id: int) -> str:
    return base64.urlsafe_b64encode(f"{_PREFIX}{last_id}".encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> int:
    try:
        text = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise InvalidCursor(f"invalid cursor {cursor!r}: pass back a next_cursor from a previous page") from None
    if not text.startswith(_PREFIX) or not text[len(_PREFIX):].isdigit():
        raise InvalidCursor(f"invalid cursor {cursor!r}: pass back a next_cursor from a previous page")
    value = int(text[len(_PREFIX):])
    if value > MAX_ID:
        raise InvalidCursor(f"invalid cursor {cursor!r}: out of range")
    return value


def keyset_page(
    session: Session,
    statement: Select[Any],
    id_column: Any,
    *,
    limit: int,
    cursor: str | None,
    newest_first: bool = False,
) -> Page[Any]:
    """One page of ``statement``'s entities ordered by ``id_column``, after ``cursor``."""
    if cursor is not None:
        after = decode_cursor(cursor)
        statement = statement.where(id_column < after if newest_first else id_column > after)
    order = id_column.desc() if newest_first else id_column.asc()
    # One row more than asked tells whether another page exists without counting.
    rows = list(session.scalars(statement.order_by(order).limit(limit + 1)).unique())
    if len(rows) <= limit:
        return Page(items=rows, next_cursor=None)
    items = rows[:limit]
    return Page(items=items, next_cursor=encode_cursor(_id_of(items[-1], id_column)))


def _id_of(entity: Any, id_column: Any) -> int:
    return int(getattr(entity, id_column.key))
