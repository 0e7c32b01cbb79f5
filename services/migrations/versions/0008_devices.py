"""0008 (after 0007): what the GPU path records. Per cell: the reference's method and error estimate,
the precision the frameworks ran with, and the spread of repeated results (nondeterminism); per job:
the device record of the worker that ran it; per scenario of a run: its device requirements; per
run: its engine options (repeats)."""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0008"
down_revision = "0007"

JSON = sa.JSON().with_variant(JSONB(), "postgresql")


def upgrade() -> None:
    # Server defaults fill the rows stored before these columns existed: nothing was recorded then.
    with op.batch_alter_table("results") as batch:
        batch.add_column(sa.Column("reference", sa.Text(), nullable=False, server_default=""))
        batch.add_column(sa.Column("reference_error", sa.Float(), nullable=True))
        batch.add_column(sa.Column("precision", sa.Text(), nullable=False, server_default=""))
        batch.add_column(sa.Column("repeat_spread", sa.Float(), nullable=True))
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("device_record", JSON, nullable=True))
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("options", JSON, nullable=False, server_default="{}"))
    with op.batch_alter_table("scenario_catalog") as batch:
        batch.add_column(sa.Column("requirements", JSON, nullable=False, server_default="{}"))


def downgrade() -> None:
    with op.batch_alter_table("scenario_catalog") as batch:
        batch.drop_column("requirements")
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("options")
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("device_record")
    with op.batch_alter_table("results") as batch:
        for name in ("repeat_spread", "precision", "reference_error", "reference"):
            batch.drop_column(name)
