"""``INSERT … ON CONFLICT`` for the two databases we run on.

Both PostgreSQL and SQLite spell it the same way, but SQLAlchemy keeps the construct in each
dialect's own ``insert``; this picks the right one for a session's connection.
"""
from __future__ import annotations

from typing import Any, cast

from sqlalchemy import CursorResult, FromClause, Result, Table
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

_INSERTS = {"postgresql": postgresql.insert, "sqlite": sqlite.insert}


def dialect_insert(session: Session, table: FromClause) -> Any:
    dialect = session.get_bind().dialect.name
    try:
        return _INSERTS[dialect](cast(Table, table))  # a mapped class's __table__: a Table
    except KeyError:
        raise NotImplementedError(f"gradci stores data in PostgreSQL or SQLite, not {dialect}") from None


def rows_matched(result: Result[Any]) -> int:
    """How many rows an UPDATE or DELETE matched.

    ``Session.execute`` types its answer as a plain ``Result``; for these statements it is a
    ``CursorResult``.
    """
    assert isinstance(result, CursorResult)
    return result.rowcount
