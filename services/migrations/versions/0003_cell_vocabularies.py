"""0003 (after 0002, 2026-11-30): the database refuses cells the engine could never produce —
check constraints on the results' operator, framework, mode and dtype, from ``gradci.scenarios.contract.cell``'s
vocabularies. Rows already stored outside a vocabulary (written before ingestion validated cells)
are removed first: they were never results of a real check."""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from gradci.services.db.models import cell_vocabulary_checks

revision = "0003"
down_revision = "0002"

NEW_CHECKS = ("operator", "framework", "mode", "dtype")


def _checks() -> list[sa.CheckConstraint]:
    return [check for check in cell_vocabulary_checks() if check.name in NEW_CHECKS]


def upgrade() -> None:
    for check in _checks():
        op.execute(f"DELETE FROM results WHERE NOT ({check.sqltext})")
    with op.batch_alter_table("results") as batch:
        for check in _checks():
            batch.create_check_constraint(str(check.name), check.sqltext)


def downgrade() -> None:
    with op.batch_alter_table("results") as batch:
        for name in NEW_CHECKS:
            batch.drop_constraint(op.f(f"ck_results_{name}"), type_="check")
