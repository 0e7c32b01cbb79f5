"""0013 (after 0012, 2026-12-01): webhook deliveries are stored by the API and acted on by a worker —
what the request decided, the pull request a delivery concerns (acted on in stored order), when a
worker acted on it and what it did. Deliveries stored before were acted on in their request."""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

from gradci.services.migrations.columns import add_columns, drop_columns

revision = "0013"
down_revision = "0012"

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
TIMESTAMP = sa.DateTime(timezone=True)


def added() -> dict[str, list[sa.Column]]:
    return {"deliveries": [sa.Column("decision", JSON, nullable=True),
                           sa.Column("subject", sa.String(320), nullable=True),
                           sa.Column("processed_at", TIMESTAMP, nullable=True),
                           sa.Column("outcome", JSON, nullable=True)]}


def upgrade() -> None:
    add_columns(added)
    op.execute("UPDATE deliveries SET processed_at = received_at")
    with op.batch_alter_table("deliveries") as batch:
        batch.create_index(op.f("ix_deliveries_processed_at_subject"), ["processed_at", "subject"])


def downgrade() -> None:
    with op.batch_alter_table("deliveries") as batch:
        batch.drop_index(op.f("ix_deliveries_processed_at_subject"))
    drop_columns(added)
