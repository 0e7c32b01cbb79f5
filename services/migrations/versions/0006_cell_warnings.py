"""0006 (after 0005): the warnings a cell's computation raised (``gradci.scenarios.contract.cell.Cell.warnings``)."""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"


def upgrade() -> None:
    # The server default fills the rows stored before this column existed: they raised none we kept.
    with op.batch_alter_table("results") as batch:
        batch.add_column(sa.Column("warnings", sa.Text(), nullable=False, server_default=""))


def downgrade() -> None:
    with op.batch_alter_table("results") as batch:
        batch.drop_column("warnings")
