"""Initial schema: repositories, runs, jobs, results, scenario catalog, deliveries, workers.

Revision ID: 0001
Revises:
Create Date: 2026-11-30

Frozen copy of services/db/models.py at this revision (a migration must not change when the
models do); tests/services/test_db.py checks that the two still agree.
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0001"
down_revision = None

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
TIMESTAMP = sa.DateTime(timezone=True)


def check(table: str, column: str, values: tuple[str, ...]) -> sa.CheckConstraint:
    allowed = ", ".join(f"'{value}'" for value in values)
    return sa.CheckConstraint(f"{column} IN ({allowed})", name=op.f(f"ck_{table}_{column}"))


def upgrade() -> None:
    op.create_table(
        "repositories",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("url", sa.String(2048), nullable=False),
        sa.Column("full_name", sa.String(255), nullable=True),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_repositories")),
        sa.UniqueConstraint("url", name=op.f("uq_repositories_url")),
    )
    op.create_table(
        "workers",
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("host", sa.String(255), nullable=False),
        sa.Column("device", sa.String(32), nullable=False),
        sa.Column("queue", sa.String(64), nullable=False),
        sa.Column("versions", JSON, nullable=False),
        sa.Column("started_at", TIMESTAMP, nullable=False),
        sa.Column("last_heartbeat", TIMESTAMP, nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_workers")),
    )
    op.create_index(op.f("ix_workers_last_heartbeat"), "workers", ["last_heartbeat"])

    op.create_table(
        "runs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("repository_id", sa.Integer(), nullable=True),
        sa.Column("head_sha", sa.String(64), nullable=True),
        sa.Column("base_sha", sa.String(64), nullable=True),
        sa.Column("ref", sa.String(255), nullable=True),
        sa.Column("pr_number", sa.Integer(), nullable=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("matrix", JSON, nullable=False),
        sa.Column("trigger", sa.String(16), nullable=False),
        sa.Column("parent_run_id", sa.Integer(), nullable=True),
        sa.Column("cancel_requested", sa.Boolean(), nullable=False),
        sa.Column("coverage", sa.Float(), nullable=True),
        sa.Column("error_message", sa.Text(), nullable=True),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.Column("started_at", TIMESTAMP, nullable=True),
        sa.Column("finished_at", TIMESTAMP, nullable=True),
        check("runs", "status", ("queued", "running", "passed", "failed", "cancelled", "error")),
        check("runs", "trigger", ("api", "webhook", "push", "rerun", "demo")),
        sa.ForeignKeyConstraint(
            ["parent_run_id"], ["runs.id"], name=op.f("fk_runs_parent_run_id_runs"), ondelete="SET NULL"
        ),
        sa.ForeignKeyConstraint(["repository_id"], ["repositories.id"],
                                name=op.f("fk_runs_repository_id_repositories")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_runs")),
    )
    op.create_index(op.f("ix_runs_head_sha"), "runs", ["head_sha"])
    op.create_index(op.f("ix_runs_pr_number"), "runs", ["pr_number"])
    op.create_index(op.f("ix_runs_repository_id_id"), "runs", ["repository_id", "id"])
    op.create_index(op.f("ix_runs_status"), "runs", ["status"])

    op.create_table(
        "deliveries",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("delivery_id", sa.String(64), nullable=False),
        sa.Column("event", sa.String(64), nullable=False),
        sa.Column("action", sa.String(64), nullable=True),
        sa.Column("payload", JSON, nullable=False),
        sa.Column("received_at", TIMESTAMP, nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=True),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], name=op.f("fk_deliveries_run_id_runs"), ondelete="SET NULL"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_deliveries")),
        sa.UniqueConstraint("delivery_id", name=op.f("uq_deliveries_delivery_id")),
    )
    op.create_table(
        "jobs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("backend", sa.String(64), nullable=False),
        sa.Column("device", sa.String(32), nullable=False),
        sa.Column("queue", sa.String(64), nullable=False),
        sa.Column("scenarios", JSON, nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("worker", sa.String(255), nullable=True),
        sa.Column("message", sa.Text(), nullable=True),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.Column("started_at", TIMESTAMP, nullable=True),
        sa.Column("finished_at", TIMESTAMP, nullable=True),
        check("jobs", "status", ("queued", "running", "done", "error", "cancelled")),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], name=op.f("fk_jobs_run_id_runs"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_jobs")),
    )
    op.create_index(op.f("ix_jobs_run_id_status"), "jobs", ["run_id", "status"])

    op.create_table(
        "scenario_catalog",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("operator", sa.String(32), nullable=False),
        sa.Column("fingerprint", sa.String(64), nullable=True),
        sa.Column("tags", JSON, nullable=False),
        sa.ForeignKeyConstraint(
            ["run_id"], ["runs.id"], name=op.f("fk_scenario_catalog_run_id_runs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_scenario_catalog")),
        sa.UniqueConstraint("run_id", "name", name=op.f("uq_scenario_catalog_run_id_name")),
    )
    op.create_table(
        "results",
        # SQLite autoincrements only an INTEGER primary key.
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("job_id", sa.Integer(), nullable=True),
        sa.Column("scenario", sa.String(255), nullable=False),
        sa.Column("operator", sa.String(32), nullable=False),
        sa.Column("framework", sa.String(32), nullable=False),
        sa.Column("backend", sa.String(64), nullable=False),
        sa.Column("mode", sa.String(32), nullable=False),
        sa.Column("device", sa.String(32), nullable=False),
        sa.Column("dtype", sa.String(32), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("max_abs_err", sa.Float(), nullable=True),
        sa.Column("max_rel_err", sa.Float(), nullable=True),
        sa.Column("atol", sa.Float(), nullable=True),
        sa.Column("rtol", sa.Float(), nullable=True),
        sa.Column("time_ms", sa.Float(), nullable=True),
        sa.Column("first_call_ms", sa.Float(), nullable=True),
        sa.Column("peak_memory_bytes", sa.BigInteger(), nullable=True),
        sa.Column("message", sa.Text(), nullable=False),
        sa.Column("fingerprint", sa.String(64), nullable=True),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        check("results", "status", ("pass", "fail", "error", "skip", "xfail", "xpass")),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"], name=op.f("fk_results_job_id_jobs"), ondelete="SET NULL"),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], name=op.f("fk_results_run_id_runs"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_results")),
        # The upsert key: a redelivered job replaces its cells instead of duplicating them.
        sa.UniqueConstraint(
            "run_id", "scenario", "backend", "device", "dtype",
            name=op.f("uq_results_run_id_scenario_backend_device_dtype"),
        ),
    )
    op.create_index(op.f("ix_results_job_id"), "results", ["job_id"])
    op.create_index(op.f("ix_results_run_id_id"), "results", ["run_id", "id"])
    op.create_index(op.f("ix_results_run_id_status_id"), "results", ["run_id", "status", "id"])


def downgrade() -> None:
    for table in ("results", "scenario_catalog", "jobs", "deliveries", "runs", "workers", "repositories"):
        op.drop_table(table)
