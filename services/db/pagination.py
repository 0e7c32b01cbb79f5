"""Keyset ("cursor") pagination over an integer id.

Pages stay stable while rows are inserted, and a page costs an index seek however deep it is, unlike
OFFSET. A grouped page walks through several statements in turn (a run's cells status by status),
its cursor naming the group it is in.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any, Generic, TypeVar

from sqlalchemy import BigInteger, Select, literal
from sqlalchemy.orm import Session

T = TypeVar("T")
# A cursor is the last id of the previous page ("1234"), and for a grouped page the group first
# ("2.1234"). Plain numbers, so that every cursor the API's schema admits is one it can serve: a
# position past the end is an empty page, not an error.
ID_DIGITS = 18  # below 2**63: PostgreSQL's bigint
CURSOR_PATTERN = rf"^[0-9]{{1,{ID_DIGITS}}}$"


class InvalidCursor(ValueError):
    """A cursor this service did not issue; the API answers 400."""


@dataclasses.dataclass
class Page(Generic[T]):
    items: list[T]
    next_cursor: str | None


def encode_cursor(last_id: int, group: int | None = None) -> str:
    return f"{last_id}" if group is None else f"{group}.{last_id}"


def _decode(cursor: str, parts: int) -> list[int]:
    numbers = cursor.split(".")
    if len(numbers) != parts or not all(n.isascii() and n.isdigit() and len(n) <= ID_DIGITS for n in numbers):
        raise InvalidCursor(f"invalid cursor {cursor!r}: pass back a next_cursor from a previous page")
    return [int(n) for n in numbers]


def decode_cursor(cursor: str) -> int:
    return _decode(cursor, 1)[0]


def _position(after: int) -> Any:
    # As a bigint: a cursor past a 32-bit id column's range is a position past its end, not an error.
    return literal(after, BigInteger)


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
        after = _position(decode_cursor(cursor))
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


def grouped_keyset_page(
    session: Session,
    groups: Sequence[Select[Any]],
    id_column: Any,
    *,
    limit: int,
    cursor: str | None,
) -> Page[Any]:
    """One page through the entities of ``groups`` in turn, each group's in ``id_column`` order.

    At most one index seek per group, however deep the page.
    """
    first_group, after = _decode(cursor, 2) if cursor is not None else (0, None)
    found: list[tuple[int, Any]] = []
    for index in range(first_group, len(groups)):
        statement = groups[index]
        if index == first_group and after is not None:
            statement = statement.where(id_column > _position(after))
        wanted = limit + 1 - len(found)
        found.extend((index, row) for row in session.scalars(statement.order_by(id_column.asc()).limit(wanted)))
        if len(found) > limit:
            break
    if len(found) <= limit:
        return Page(items=[row for _, row in found], next_cursor=None)
    group, last = found[limit - 1]
    return Page(items=[row for _, row in found[:limit]], next_cursor=encode_cursor(_id_of(last, id_column), group))
