"""Alembic migrations (a package so that setuptools ships them)."""
