"""Storage: SQLAlchemy models, sessions, batched result upserts and the queries the API serves.

PostgreSQL in production, SQLite as the embedded default; the schema lives in ``models`` and is
created by the Alembic migrations in ``services/migrations`` (``gradci.services.db.migrate.upgrade``).
"""
