"""One engine and one sessionmaker per database URL, per process.

SQLite is the embedded default and the API and several worker processes write to it at once, so
every SQLite connection gets WAL (readers never block the writer), a busy timeout (a writer waits
for the lock instead of failing) and ``BEGIN IMMEDIATE`` transactions: a deferred transaction that
reads and then writes cannot wait for the lock and fails with "database is locked" when another
process committed in between. Sessions that only read (API GETs, long exports) ask for
``readonly=True`` and begin deferred, so they never hold the write lock while workers wait for it.
"""
from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.orm import Session, sessionmaker

from gradci.services.database_urls import ensure_sqlite_directory, normalize_database_url

SQLITE_BUSY_TIMEOUT_MS = 30_000
_SQLITE_BEGIN = "gradci_sqlite_begin"  # execution option: how an SQLite transaction begins


def _configure_sqlite(engine: Engine) -> None:
    @event.listens_for(engine, "connect")
    def on_connect(dbapi_connection, _record) -> None:
        # Let SQLAlchemy, not the driver, decide when transactions begin (see "begin" below).
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute(f"PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}")
        cursor.execute("PRAGMA journal_mode = WAL")
        cursor.execute("PRAGMA synchronous = NORMAL")  # safe with WAL, much faster commits
        cursor.execute("PRAGMA foreign_keys = ON")
        cursor.close()

    @event.listens_for(engine, "begin")
    def on_begin(connection) -> None:
        mode = connection.get_execution_options().get(_SQLITE_BEGIN, "IMMEDIATE")
        connection.exec_driver_sql(f"BEGIN {mode}")


_engines: dict[str, Engine] = {}
_sessionmakers: dict[tuple[str, bool], sessionmaker[Session]] = {}
_lock = threading.Lock()
_fork_hook_installed = False


def _create_engine(url: str) -> Engine:
    parsed = normalize_database_url(url)
    if parsed.get_backend_name() == "sqlite":
        ensure_sqlite_directory(parsed)
        engine = create_engine(parsed, connect_args={"timeout": SQLITE_BUSY_TIMEOUT_MS / 1000})
        _configure_sqlite(engine)
        return engine
    # pre_ping: a worker idles for hours between jobs and Postgres may have dropped its connections.
    return create_engine(parsed, pool_pre_ping=True)


def engine_for(url: str) -> Engine:
    global _fork_hook_installed
    with _lock:
        if not _fork_hook_installed:  # with the first engine, not at import
            os.register_at_fork(after_in_child=_forget_parent_connections)
            _fork_hook_installed = True
        if url not in _engines:
            _engines[url] = _create_engine(url)
        return _engines[url]


def sessionmaker_for(url: str, *, readonly: bool = False) -> sessionmaker[Session]:
    """Sessions on ``url``. ``readonly`` sessions must not write: on SQLite they begin deferred."""
    engine = engine_for(url)
    if readonly:
        engine = engine.execution_options(**{_SQLITE_BEGIN: "DEFERRED"})
    with _lock:
        if (url, readonly) not in _sessionmakers:
            # expire_on_commit=False: API handlers serialise objects after committing them.
            _sessionmakers[url, readonly] = sessionmaker(bind=engine, expire_on_commit=False)
        return _sessionmakers[url, readonly]


@contextmanager
def session_scope(url: str, *, readonly: bool = False) -> Iterator[Session]:
    """A session on ``url`` that commits on success and rolls back on error."""
    with sessionmaker_for(url, readonly=readonly)() as session, session.begin():
        yield session


def dispose_engine(url: str) -> None:
    """Close and forget the engine of one URL (before dropping its database, say)."""
    with _lock:
        engine = _engines.pop(url, None)
        _sessionmakers.pop((url, False), None)
        _sessionmakers.pop((url, True), None)
    if engine is not None:
        engine.dispose()


def dispose_engines() -> None:
    """Close and forget every engine of this process (tests; shutting down)."""
    with _lock:
        engines = list(_engines.values())
        _engines.clear()
        _sessionmakers.clear()
    for engine in engines:
        engine.dispose()


def _forget_parent_connections() -> None:
    # A forked child (Celery's prefork pool) must not use the parent's pooled sockets; close=False
    # leaves them open for the parent, which still owns them.
    for engine in _engines.values():
        engine.dispose(close=False)
