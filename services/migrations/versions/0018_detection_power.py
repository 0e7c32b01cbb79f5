"""0018 (after 0017, 2026-12-04): detection power — a repository's option to measure it on its default
branch, and each cell's power record (which planted errors in the rules it reached it caught)."""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0018"
down_revision = "0017"

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
BIG_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "repository_options",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("full_name", sa.String(200), nullable=False),
        sa.Column("power", sa.Boolean(), nullable=False, server_default=sa.false()),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_repository_options")),
        sa.UniqueConstraint("full_name", name=op.f("uq_repository_options_full_name")),
    )
    op.create_table(
        "cell_power",
        sa.Column("id", BIG_ID, nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("scenario", sa.String(255), nullable=False),
        sa.Column("backend", sa.String(64), nullable=False),
        sa.Column("device", sa.String(32), nullable=False),
        sa.Column("dtype", sa.String(32), nullable=False),
        sa.Column("smallest_delta", sa.Float(), nullable=True),
        sa.Column("record", JSON, nullable=False),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], name=op.f("fk_cell_power_run_id_runs"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_cell_power")),
        sa.UniqueConstraint("run_id", "scenario", "backend", "device", "dtype",
                            name=op.f("uq_cell_power_run_id_scenario_backend_device_dtype")),
    )


def downgrade() -> None:
    for table in ("cell_power", "repository_options"):
        op.drop_table(table)
