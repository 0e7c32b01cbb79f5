"""Run the Alembic migrations from code, with no alembic.ini.

``gradci migrate`` and the test fixtures call ``upgrade``; the migration scripts ship inside the
package.
"""
from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext

from gradci.services.db.session import engine_for

MIGRATIONS_DIR = Path(__file__).resolve().parent.parent / "migrations"


def alembic_config(database_url: str) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    # Passed as an attribute, not a main option: ConfigParser would treat "%" in a password as interpolation.
    config.attributes["database_url"] = database_url
    return config


def upgrade(database_url: str, revision: str = "head") -> None:
    """Bring the database at ``database_url`` up to ``revision``."""
    command.upgrade(alembic_config(database_url), revision)


def current_revision(database_url: str) -> str | None:
    """The revision the database is at; None before the first migration."""
    with engine_for(database_url).connect() as connection:
        return MigrationContext.configure(connection).get_current_revision()
