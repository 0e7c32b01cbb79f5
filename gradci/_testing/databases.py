"""The databases that tests and benchmarks use.

Scratch PostgreSQL databases (made, migrated to head, dropped) on the cluster an admin URL names,
and the test session's own.

The test session has one uniquely named database in the cluster behind ``GRADCI_TEST_POSTGRES_URL``,
and one Redis database number among 1..12 of the server behind ``GRADCI_TEST_REDIS_URL`` (its
database part is ignored), claimed with a key in database 0 so that no other session uses it at the
same time, and flushed before each user.
"""
from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy.engine import make_url

from gradci.services.db.migrate import upgrade
from gradci.services.db.models import Base
from gradci.services.db.session import dispose_engine, engine_for


def admin_connection(admin_url: str) -> Any:
    """An autocommit connection to the cluster (psycopg.OperationalError when it does not answer)."""
    import psycopg

    admin = make_url(admin_url)
    return psycopg.connect(host=admin.host, port=admin.port or 5432, user=admin.username,
                           password=admin.password, dbname=admin.database, autocommit=True, connect_timeout=5)


@contextmanager
def scratch_database(admin_url: str, prefix: str) -> Iterator[str]:
    """The URL of a new database named ``prefix_<random>``, migrated; dropped on exit."""
    from psycopg import sql

    name = f"{prefix}_{uuid.uuid4().hex[:8]}"
    with admin_connection(admin_url) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    url = make_url(admin_url).set(database=name).render_as_string(hide_password=False)
    try:
        upgrade(url)
        yield url
    finally:
        dispose_engine(url)
        with admin_connection(admin_url) as admin:
            admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


POSTGRES_ADMIN_URL = os.environ.get("GRADCI_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
REDIS_SERVER_URL = os.environ.get("GRADCI_TEST_REDIS_URL", "redis://127.0.0.1:6379/13")
REDIS_BASE = REDIS_SERVER_URL.rsplit("/", 1)[0] if REDIS_SERVER_URL.count("/") > 2 else REDIS_SERVER_URL
REDIS_CLAIMABLE = range(1, 13)  # 0 holds the claims; bench/ uses 15
# Every table of the models (a new one is emptied too, with no list to forget it in); not Alembic's own.
TABLES = tuple(table.name for table in Base.metadata.sorted_tables)



class RedisUnavailable(Exception):
    """No Redis answers, or every database number is claimed."""


def emptied(database_url: str) -> str:
    """The PostgreSQL database with every table emptied.

    A service started over it must begin so: its reconciler would otherwise plan the runs an earlier
    test left queued, and its jobs would wait behind theirs.
    """
    with engine_for(database_url).begin() as connection:
        connection.exec_driver_sql(f"TRUNCATE {', '.join(TABLES)} RESTART IDENTITY CASCADE")
    return database_url


def flushed(redis_url: str) -> str:
    """The Redis database, flushed (no message an earlier test left)."""
    import redis

    with redis.Redis.from_url(redis_url, socket_connect_timeout=3) as client:
        client.flushdb()
    return redis_url


@contextmanager
def claimed_redis_database(base: str = REDIS_BASE) -> Iterator[str]:
    """The URL of a Redis database number claimed for as long as the block runs; flushed on both ends."""
    import redis

    claims = redis.Redis.from_url(f"{base}/0", socket_connect_timeout=3)
    try:
        claims.ping()
    except redis.ConnectionError as exc:
        claims.close()
        raise RedisUnavailable(f"Redis is not reachable at {base}: {exc}") from exc
    number = next((n for n in REDIS_CLAIMABLE
                   if claims.set(f"gradci-test-claim:{n}", os.getpid(), nx=True, ex=6 * 3600)), None)
    if number is None:
        claims.close()
        raise RedisUnavailable("every Redis test database is claimed by another session")
    url = flushed(f"{base}/{number}")
    try:
        yield url
    finally:
        flushed(url)
        claims.delete(f"gradci-test-claim:{number}")
        claims.close()
