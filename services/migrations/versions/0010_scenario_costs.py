"""0010 (after 0009, 2026-12-01): what each cell's scenario cost before any backend ran — its
reference's time and its module's import time — and the whole text of an error cell's exception."""
from __future__ import annotations

import sqlalchemy as sa

from gradci.services.migrations.columns import adding_columns

revision = "0010"
down_revision = "0009"

upgrade, downgrade = adding_columns(lambda: {
    "results": [sa.Column("reference_ms", sa.Float(), nullable=True),
                sa.Column("import_ms", sa.Float(), nullable=True),
                sa.Column("detail", sa.Text(), nullable=False, server_default="")],
})
