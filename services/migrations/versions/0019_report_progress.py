"""0019 (after 0017, 2026-12-04): a run's check run shows its first failures while it runs — when the
last such update went out and how many did, so that they are rate-limited per run."""
from __future__ import annotations

import sqlalchemy as sa

from gradci.services.migrations.columns import add_columns, drop_columns

revision = "0019"
down_revision = "0018"


def added() -> dict[str, list[sa.Column]]:
    return {"github_reports": [sa.Column("progress_at", sa.DateTime(timezone=True), nullable=True),
                               sa.Column("progress_updates", sa.Integer(), nullable=False, server_default="0")]}


def upgrade() -> None:
    add_columns(added)


def downgrade() -> None:
    drop_columns(added)
