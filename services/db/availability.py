"""Which database errors mean "the database is away for now" rather than "this work is wrong".

Work that fails with one of these is retried (Celery's ``autoretry_for``, or a short wait in
place), never acknowledged as done: PostgreSQL restarting, a dropped connection, SQLite's lock
held too long all pass, and the same work then succeeds.
"""
from __future__ import annotations

from sqlalchemy.exc import InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout

DATABASE_UNAVAILABLE: tuple[type[Exception], ...] = (OperationalError, InterfaceError, PoolTimeout)
