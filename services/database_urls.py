"""Database URLs: which driver a URL means here, and where an SQLite URL keeps its file."""
from __future__ import annotations

from pathlib import Path

from sqlalchemy.engine import URL, make_url


def normalize_database_url(url: str | URL) -> URL:
    """``postgres://`` and ``postgresql://`` mean psycopg 3 here (psycopg2 is not a dependency)."""
    parsed = make_url(url)
    if parsed.drivername in ("postgres", "postgresql"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed


def sqlite_file(url: str | URL) -> Path | None:
    """The database file of an SQLite URL; None for other databases and in-memory SQLite."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite" or parsed.database in (None, "", ":memory:"):
        return None
    return Path(parsed.database)


def ensure_sqlite_directory(url: str | URL) -> None:
    """SQLite creates the file but not its folder: create ``.gradci/`` on first use."""
    path = sqlite_file(url)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
