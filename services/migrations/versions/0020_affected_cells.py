"""0020 (after 0017, 2026-12-04): affected cells — each cell's dependency record (content-addressed), a
carried cell's provenance, and what each run carried from its base."""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0020"
down_revision = "0019"

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    op.create_table(
        "dependency_records",
        sa.Column("digest", sa.String(64), nullable=False),
        sa.Column("record", JSON, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("digest", name=op.f("pk_dependency_records")),
    )
    with op.batch_alter_table("results") as batch:
        batch.add_column(sa.Column("depends_digest", sa.String(64), nullable=True))
        batch.add_column(sa.Column("carried_run_id", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("carried_sha", sa.String(64), nullable=True))
        batch.add_column(sa.Column("carried_reason", sa.String(255), nullable=True))
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("carry", JSON, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("carry")
    with op.batch_alter_table("results") as batch:
        for column in ("carried_reason", "carried_sha", "carried_run_id", "depends_digest"):
            batch.drop_column(column)
    op.drop_table("dependency_records")
