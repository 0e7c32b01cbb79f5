"""``INSERT … ON CONFLICT`` for the two databases we run on.

Both PostgreSQL and SQLite spell it the same way, but SQLAlchemy keeps the construct in each
dialect's own ``insert``; this picks the right one for a session's connection.
"""
from __future__ import annotations

from typing import Any

from sqlalchemy import Table
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

_INSERTS = {"postgresql": postgresql.insert, "sqlite": sqlite.insert}


def dialect_insert(session: Session, table: Table) -> Any:
    dialect = session.get_bind().dialect.name
    try:
        return _INSERTS[dialect](table)
    except KeyError:
        raise NotImplementedError(f"gradci stores data in PostgreSQL or SQLite, not {dialect}") from None
