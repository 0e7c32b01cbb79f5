"""0004 (after 0003): what reconciling the database with the broker needs — when each job last
entered its queue, the delivery that holds a running job and that delivery's lease — and when a
pending GitHub report may be sent again (the sweeper's exponential backoff)."""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from gradci.services.migrations.columns import add_columns, drop_columns

revision = "0004"
down_revision = "0003"

TIMESTAMP = sa.DateTime(timezone=True)


def added() -> dict[str, list[sa.Column]]:
    return {"jobs": [sa.Column("queued_at", TIMESTAMP, nullable=True),
                     sa.Column("delivery", sa.String(64), nullable=True),
                     sa.Column("lease_renewed_at", TIMESTAMP, nullable=True)],
            "github_reports": [sa.Column("next_attempt_at", TIMESTAMP, nullable=True)]}


def upgrade() -> None:
    add_columns(added)
    op.execute("UPDATE jobs SET queued_at = created_at")
    with op.batch_alter_table("jobs") as batch:
        batch.alter_column("queued_at", existing_type=TIMESTAMP, nullable=False)
        batch.create_index(op.f("ix_jobs_status_queued_at"), ["status", "queued_at"])


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_index(op.f("ix_jobs_status_queued_at"))
    drop_columns(added)
