"""0016 (after 0015, 2026-12-04): registered repositories — those ``gradci repos add`` lets in where
the service is closed by default (App installations, OIDC uploads)."""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"


def upgrade() -> None:
    op.create_table(
        "registered_repositories",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("full_name", sa.String(200), nullable=False),
        sa.Column("added_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_registered_repositories")),
        sa.UniqueConstraint("full_name", name=op.f("uq_registered_repositories_full_name")),
    )


def downgrade() -> None:
    op.drop_table("registered_repositories")
