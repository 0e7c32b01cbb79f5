"""Run the Alembic migrations from code, with no alembic.ini: ``gradci migrate`` and the test
fixtures call ``upgrade``; the migration scripts ship inside the package."""
from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config

MIGRATIONS_DIR = Path(__file__).resolve().parent.parent / "migrations"


def alembic_config(database_url: str | None = None) -> Config:
    if database_url is None:
        from services.settings import get_settings

        database_url = str(get_settings().database_url)
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    # Passed as an attribute, not a main option: ConfigParser would treat "%" in a password as interpolation.
    config.attributes["database_url"] = database_url
    return config


def upgrade(database_url: str | None = None, revision: str = "head") -> None:
    """Bring the database at ``database_url`` (default: the settings') up to ``revision``."""
    command.upgrade(alembic_config(database_url), revision)


def current_revision(database_url: str | None = None) -> str | None:
    """The revision the database is at; None before the first migration."""
    from alembic.runtime.migration import MigrationContext

    from services.db.session import engine_for

    config = alembic_config(database_url)
    with engine_for(config.attributes["database_url"]).connect() as connection:
        return MigrationContext.configure(connection).get_current_revision()
