"""0011 (after 0010, 2026-12-02): results uploaded from a project's own CI — runs triggered by an
upload, the shards of each upload run and the cells each brought, and the per-repository upload
tokens (their hashes only)."""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0011"
down_revision = "0010"

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
TIMESTAMP = sa.DateTime(timezone=True)
TRIGGERS_BEFORE = ("api", "webhook", "push", "rerun", "demo")
TRIGGERS_AFTER = (*TRIGGERS_BEFORE, "upload")


def _replace_trigger_check(values: tuple[str, ...]) -> None:
    allowed = ", ".join(f"'{value}'" for value in values)
    with op.batch_alter_table("runs") as batch:
        batch.drop_constraint(op.f("ck_runs_trigger"), type_="check")
        batch.create_check_constraint(op.f("ck_runs_trigger"), f"trigger IN ({allowed})")


def upgrade() -> None:
    _replace_trigger_check(TRIGGERS_AFTER)
    with op.batch_alter_table("results") as batch:
        batch.add_column(sa.Column("shard_id", sa.Integer(), nullable=True))
    op.create_table(
        "uploads",
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("repository_id", sa.Integer(), nullable=False),
        sa.Column("head_sha", sa.String(64), nullable=False),
        sa.Column("expected_shards", JSON, nullable=False),
        sa.Column("first_upload_at", TIMESTAMP, nullable=False),
        sa.Column("deadline", TIMESTAMP, nullable=False),
        sa.Column("closed_at", TIMESTAMP, nullable=True),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], name=op.f("fk_uploads_run_id_runs"), ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["repository_id"], ["repositories.id"],
                                name=op.f("fk_uploads_repository_id_repositories")),
        sa.PrimaryKeyConstraint("run_id", name=op.f("pk_uploads")),
        sa.UniqueConstraint("repository_id", "head_sha", name=op.f("uq_uploads_repository_id_head_sha")),
    )
    op.create_index(op.f("ix_uploads_closed_at_deadline"), "uploads", ["closed_at", "deadline"])
    op.create_table(
        "upload_shards",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("cells", sa.Integer(), nullable=False),
        sa.Column("times_uploaded", sa.Integer(), nullable=False),
        sa.Column("received_at", TIMESTAMP, nullable=False),
        sa.ForeignKeyConstraint(["run_id"], ["uploads.run_id"], name=op.f("fk_upload_shards_run_id_uploads"),
                                ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_upload_shards")),
        sa.UniqueConstraint("run_id", "name", name=op.f("uq_upload_shards_run_id_name")),
    )
    op.create_table(
        "upload_tokens",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("full_name", sa.String(255), nullable=False),
        sa.Column("prefix", sa.String(16), nullable=False),
        sa.Column("token_hash", sa.String(64), nullable=False),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.Column("last_used_at", TIMESTAMP, nullable=True),
        sa.Column("revoked_at", TIMESTAMP, nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_upload_tokens")),
        sa.UniqueConstraint("token_hash", name=op.f("uq_upload_tokens_token_hash")),
    )
    op.create_index(op.f("ix_upload_tokens_prefix"), "upload_tokens", ["prefix"])


def downgrade() -> None:
    op.drop_index(op.f("ix_upload_tokens_prefix"), table_name="upload_tokens")
    op.drop_table("upload_tokens")
    op.drop_table("upload_shards")
    op.drop_index(op.f("ix_uploads_closed_at_deadline"), table_name="uploads")
    op.drop_table("uploads")
    with op.batch_alter_table("results") as batch:
        batch.drop_column("shard_id")
    op.execute("DELETE FROM runs WHERE trigger = 'upload'")
    _replace_trigger_check(TRIGGERS_BEFORE)
