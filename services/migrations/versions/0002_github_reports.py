"""GitHub reports: the run's gradci.toml (report targets) and what is owed to GitHub per run.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0002"
down_revision = "0001"

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
TIMESTAMP = sa.DateTime(timezone=True)


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("config", JSON, nullable=False, server_default=sa.text("'{}'")))
    op.create_table(
        "github_reports",
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("full_name", sa.String(255), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("published_phase", sa.String(16), nullable=True),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("updated_at", TIMESTAMP, nullable=False),
        sa.CheckConstraint("state IN ('pending', 'published', 'failed')", name=op.f("ck_github_reports_state")),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], name=op.f("fk_github_reports_run_id_runs"),
                                ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("run_id", name=op.f("pk_github_reports")),
    )
    op.create_index(op.f("ix_github_reports_state"), "github_reports", ["state"])


def downgrade() -> None:
    op.drop_index(op.f("ix_github_reports_state"), table_name="github_reports")
    op.drop_table("github_reports")
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("config")
