"""0014 (after 0013, 2026-12-01): gradci as a GitHub App — the installation a repository's webhooks
come from (its token sends the reports), each run's check run, and where each scenario of a run was
defined (its check-run annotation's file and line, relative to the repository)."""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"


def upgrade() -> None:
    with op.batch_alter_table("repositories") as batch:
        batch.add_column(sa.Column("github_installation_id", sa.BigInteger(), nullable=True))
    with op.batch_alter_table("github_reports") as batch:
        batch.add_column(sa.Column("check_run_id", sa.BigInteger(), nullable=True))
    with op.batch_alter_table("scenario_catalog") as batch:
        batch.add_column(sa.Column("file", sa.String(1024), nullable=True))
        batch.add_column(sa.Column("line", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("scenario_catalog") as batch:
        batch.drop_column("line")
        batch.drop_column("file")
    with op.batch_alter_table("github_reports") as batch:
        batch.drop_column("check_run_id")
    with op.batch_alter_table("repositories") as batch:
        batch.drop_column("github_installation_id")
