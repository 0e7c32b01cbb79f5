"""0006 (after 0005): the warnings a cell's computation raised (``gradci.scenarios.contract.cell.Cell.warnings``)."""
from __future__ import annotations

import sqlalchemy as sa

from gradci.services.migrations.columns import adding_columns

revision = "0006"
down_revision = "0005"

# The server default fills the rows stored before this column existed: they raised none we kept.
upgrade, downgrade = adding_columns(lambda: {
    "results": [sa.Column("warnings", sa.Text(), nullable=False, server_default="")],
})
