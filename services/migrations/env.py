"""Alembic environment: the service's URL and engine.

The URL comes from ``gradci.services.db.migrate.alembic_config``, and the engine from
``gradci.services.db.session`` so SQLite gets the same pragmas as the service.
"""
from __future__ import annotations

from alembic import context

from gradci.services.database_urls import normalize_database_url
from gradci.services.db.models import Base
from gradci.services.db.session import engine_for

config = context.config
target_metadata = Base.metadata


def database_url() -> str:
    # Set by services.db.migrate.alembic_config: migrations always run through it.
    return config.attributes["database_url"]


def run_offline() -> None:
    """``alembic upgrade --sql``: print the DDL instead of running it."""
    context.configure(
        url=normalize_database_url(database_url()),
        target_metadata=target_metadata,
        literal_binds=True,
        render_as_batch=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_online() -> None:
    engine = engine_for(database_url())
    with engine.connect() as connection:
        context.configure(
            connection=connection,
            target_metadata=target_metadata,
            # SQLite cannot ALTER most things; batch mode rebuilds the table instead.
            render_as_batch=connection.dialect.name == "sqlite",
        )
        with context.begin_transaction():
            context.run_migrations()


if context.is_offline_mode():
    run_offline()
else:
    run_online()
