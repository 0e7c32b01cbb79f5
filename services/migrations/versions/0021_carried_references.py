"""0021 (after 0020, 2026-12-06): finite-difference references a default-branch run computed, with the
dependency record of their computation, for later runs whose inputs did not change."""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0021"
down_revision = "0020"


def upgrade() -> None:
    op.create_table(
        "carried_references",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("repository_id", sa.Integer(), nullable=False),
        sa.Column("scenario", sa.String(255), nullable=False),
        sa.Column("cache_key", sa.Text(), nullable=False),
        sa.Column("depends_digest", sa.String(64), nullable=False),
        sa.Column("payload", sa.LargeBinary(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("sha", sa.String(64), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["repository_id"], ["repositories.id"],
                                name=op.f("fk_carried_references_repository_id_repositories")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_carried_references")),
        sa.UniqueConstraint("repository_id", "cache_key", "depends_digest",
                            name=op.f("uq_carried_references_repository_id_cache_key_depends_digest")),
    )
    op.create_index(op.f("ix_carried_references_repository_id_scenario"), "carried_references",
                    ["repository_id", "scenario"])


def downgrade() -> None:
    op.drop_index(op.f("ix_carried_references_repository_id_scenario"), table_name="carried_references")
    op.drop_table("carried_references")
