"""0012 (after 0011, 2026-12-01): a finished run's JUnit document, rendered once and kept gzipped
(served as it is to clients that accept gzip); and how many cells the plan did not make because a
scenario gives no f for a backend's framework (counted in the summary, never listed)."""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"


def upgrade() -> None:
    with op.batch_alter_table("run_reports") as batch:
        batch.add_column(sa.Column("junit_gz", sa.LargeBinary(), nullable=True))
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("omitted_cells", sa.Integer(), nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("omitted_cells")
    with op.batch_alter_table("run_reports") as batch:
        batch.drop_column("junit_gz")
