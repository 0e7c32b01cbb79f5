"""0007 (after 0006): what the dashboard reads at scale — an index on results (scenario, run_id), so
that a scenario's history walks its last runs instead of every stored result, and a finished run's
matrix layout kept beside its report (run_reports.matrix_layout), so that the first view of a run of
a million cells does not read them all."""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0007"
down_revision = "0006"


def upgrade() -> None:
    op.create_index("ix_results_scenario_run_id", "results", ["scenario", "run_id"])
    with op.batch_alter_table("run_reports") as batch:
        batch.add_column(sa.Column("matrix_layout", sa.JSON().with_variant(JSONB(), "postgresql"), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("run_reports") as batch:
        batch.drop_column("matrix_layout")
    op.drop_index("ix_results_scenario_run_id", table_name="results")
