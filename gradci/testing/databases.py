"""Scratch PostgreSQL databases: made, migrated to head, and dropped — for the test session and
for the benchmarks, on the cluster an admin URL names."""
from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy.engine import make_url

from gradci.services.db.migrate import upgrade
from gradci.services.db.session import dispose_engine


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
