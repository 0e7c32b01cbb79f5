"""0015 (after 0014, 2026-12-03): read tokens — bearer tokens that may read the runs of some
repositories (their hashes only), for programs and the badges of private repositories."""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0015"
down_revision = "0014"

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
TIMESTAMP = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "read_tokens",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("repositories", JSON, nullable=False),
        sa.Column("prefix", sa.String(24), nullable=False),
        sa.Column("token_hash", sa.String(64), nullable=False),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.Column("revoked_at", TIMESTAMP, nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_read_tokens")),
        sa.UniqueConstraint("token_hash", name=op.f("uq_read_tokens_token_hash")),
    )
    op.create_index(op.f("ix_read_tokens_prefix"), "read_tokens", ["prefix"])


def downgrade() -> None:
    op.drop_index(op.f("ix_read_tokens_prefix"), table_name="read_tokens")
    op.drop_table("read_tokens")
