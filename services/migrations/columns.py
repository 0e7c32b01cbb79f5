"""Columns a migration adds to existing tables, declared once for its upgrade and its downgrade.

The downgrade drops what the upgrade added, in reverse, so the two cannot drift apart. The
declaration is a function that makes new columns each call (a column belongs to one table, and the
tests migrate many databases in one process).
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import sqlalchemy as sa
from alembic import op

Added = Callable[[], Mapping[str, Sequence[sa.Column]]]  # table → its new columns


def add_columns(added: Added) -> None:
    for table, columns in added().items():
        with op.batch_alter_table(table) as batch:
            for column in columns:
                batch.add_column(column)


def drop_columns(added: Added) -> None:
    for table, columns in reversed(list(added().items())):
        with op.batch_alter_table(table) as batch:
            for column in reversed(columns):
                batch.drop_column(column.name)


def adding_columns(added: Added) -> tuple[Callable[[], None], Callable[[], None]]:
    """(upgrade, downgrade) of a migration that only adds ``added``'s columns."""
    return (lambda: add_columns(added)), (lambda: drop_columns(added))
