"""0014 (after 0013, 2026-12-01): gradci as a GitHub App — the installation a repository's webhooks
come from (its token sends the reports), each run's check run, and where each scenario of a run was
defined (its check-run annotation's file and line, relative to the repository)."""
from __future__ import annotations

import sqlalchemy as sa

from gradci.services.migrations.columns import adding_columns

revision = "0014"
down_revision = "0013"

upgrade, downgrade = adding_columns(lambda: {
    "repositories": [sa.Column("github_installation_id", sa.BigInteger(), nullable=True)],
    "github_reports": [sa.Column("check_run_id", sa.BigInteger(), nullable=True)],
    "scenario_catalog": [sa.Column("file", sa.String(1024), nullable=True),
                         sa.Column("line", sa.Integer(), nullable=True)],
})
