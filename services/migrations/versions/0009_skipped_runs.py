"""0009 (after 0008, 2026-12-01): a run whose every cell was skipped ends ``skipped``, not ``passed``:
nothing that did not run reads as a pass."""
from __future__ import annotations

from alembic import op

revision = "0009"
down_revision = "0008"

BEFORE = ("queued", "running", "passed", "failed", "cancelled", "error")
AFTER = (*BEFORE, "skipped")


def _status_check(values: tuple[str, ...]) -> str:
    return "status IN ({})".format(", ".join(f"'{value}'" for value in values))


def _replace(values: tuple[str, ...]) -> None:
    with op.batch_alter_table("runs") as batch:
        batch.drop_constraint(op.f("ck_runs_status"), type_="check")
        batch.create_check_constraint(op.f("ck_runs_status"), _status_check(values))


def upgrade() -> None:
    _replace(AFTER)


def downgrade() -> None:
    op.execute("UPDATE runs SET status = 'passed' WHERE status = 'skipped'")
    _replace(BEFORE)
