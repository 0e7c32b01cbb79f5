"""0012 (after 0011, 2026-12-01): a finished run's JUnit document, rendered once and kept gzipped
(served as it is to clients that accept gzip); and how many cells the plan did not make because a
scenario gives no f for a backend's framework (counted in the summary, never listed)."""
from __future__ import annotations

import sqlalchemy as sa

from gradci.services.migrations.columns import adding_columns

revision = "0012"
down_revision = "0011"

upgrade, downgrade = adding_columns(lambda: {
    "run_reports": [sa.Column("junit_gz", sa.LargeBinary(), nullable=True)],
    "runs": [sa.Column("omitted_cells", sa.Integer(), nullable=False, server_default="0")],
})
