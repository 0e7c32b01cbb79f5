"""0017 (after 0016, 2026-12-04): rule coverage — the derivative rules of each run's checkout, the cells
that ran each rule's methods, and the lines of the checkout's files each part of a run ran."""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0017"
down_revision = "0016"

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
BIG_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def _of_run(table: str) -> sa.ForeignKeyConstraint:
    return sa.ForeignKeyConstraint(["run_id"], ["runs.id"], name=op.f(f"fk_{table}_run_id_runs"), ondelete="CASCADE")


def upgrade() -> None:
    op.create_table(
        "rule_catalog",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("rule_id", sa.String(1024), nullable=False),
        sa.Column("kind", sa.String(64), nullable=False),
        sa.Column("name", sa.String(512), nullable=False),
        sa.Column("file", sa.String(1024), nullable=False),
        sa.Column("methods", JSON, nullable=False),
        _of_run("rule_catalog"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_rule_catalog")),
        sa.UniqueConstraint("run_id", "rule_id", name=op.f("uq_rule_catalog_run_id_rule_id")),
    )
    op.create_table(
        "rule_reach",
        sa.Column("id", BIG_ID, nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("rule_id", sa.String(1024), nullable=False),
        sa.Column("method", sa.String(32), nullable=False),
        sa.Column("scenario", sa.String(255), nullable=False),
        sa.Column("backend", sa.String(64), nullable=False),
        sa.Column("operator", sa.String(32), nullable=False),
        sa.Column("mode", sa.String(32), nullable=False),
        sa.Column("device", sa.String(32), nullable=False),
        sa.Column("dtype", sa.String(32), nullable=False),
        _of_run("rule_reach"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_rule_reach")),
        sa.UniqueConstraint("run_id", "rule_id", "method", "scenario", "backend", "device", "dtype",
                            name=op.f("uq_rule_reach_cell")),
    )
    op.create_table(
        "covered_lines",
        sa.Column("id", BIG_ID, nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("part", sa.String(64), nullable=False),
        sa.Column("file", sa.String(1024), nullable=False),
        sa.Column("lines", JSON, nullable=False),
        _of_run("covered_lines"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_covered_lines")),
        sa.UniqueConstraint("run_id", "part", "file", name=op.f("uq_covered_lines_run_id_part_file")),
    )


def downgrade() -> None:
    for table in ("covered_lines", "rule_reach", "rule_catalog"):
        op.drop_table(table)
