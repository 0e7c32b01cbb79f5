"""0010 (after 0009, 2026-12-01): what each cell's scenario cost before any backend ran — its
reference's time and its module's import time — and the whole text of an error cell's exception."""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"


def upgrade() -> None:
    with op.batch_alter_table("results") as batch:
        batch.add_column(sa.Column("reference_ms", sa.Float(), nullable=True))
        batch.add_column(sa.Column("import_ms", sa.Float(), nullable=True))
        batch.add_column(sa.Column("detail", sa.Text(), nullable=False, server_default=""))


def downgrade() -> None:
    with op.batch_alter_table("results") as batch:
        batch.drop_column("detail")
        batch.drop_column("import_ms")
        batch.drop_column("reference_ms")
