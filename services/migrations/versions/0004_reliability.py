"""0004 (after 0003): what reconciling the database with the broker needs — when each job last
entered its queue, the delivery that holds a running job and that delivery's lease — and when a
pending GitHub report may be sent again (the sweeper's exponential backoff)."""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"

TIMESTAMP = sa.DateTime(timezone=True)


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("queued_at", TIMESTAMP, nullable=True))
        batch.add_column(sa.Column("delivery", sa.String(64), nullable=True))
        batch.add_column(sa.Column("lease_renewed_at", TIMESTAMP, nullable=True))
    op.execute("UPDATE jobs SET queued_at = created_at")
    with op.batch_alter_table("jobs") as batch:
        batch.alter_column("queued_at", existing_type=TIMESTAMP, nullable=False)
        batch.create_index(op.f("ix_jobs_status_queued_at"), ["status", "queued_at"])
    with op.batch_alter_table("github_reports") as batch:
        batch.add_column(sa.Column("next_attempt_at", TIMESTAMP, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("github_reports") as batch:
        batch.drop_column("next_attempt_at")
    with op.batch_alter_table("jobs") as batch:
        batch.drop_index(op.f("ix_jobs_status_queued_at"))
        batch.drop_column("lease_renewed_at")
        batch.drop_column("delivery")
        batch.drop_column("queued_at")
