"""The report of a stored run: its cells against those of the latest finished run of its base commit."""
from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from services.db.models import FINISHED_RUN_STATUSES, Result, Run, RunStatus, ScenarioCatalogEntry
from services.reports.model import ReportSubject, RunReport
from services.reports.pr_report import RunCells, build_report
from services.reports.targets import parse_report_config

CELL_FIELDS = ("scenario", "operator", "backend", "device", "dtype", "status", "max_abs_err", "max_rel_err",
               "atol", "rtol", "message")
COMPARABLE = (RunStatus.passed.value, RunStatus.failed.value)


def base_run(session: Session, run: Run, finished_only: bool = True) -> Run | None:
    """The latest run of the same repository at ``run.base_sha`` (finished with results, unless
    ``finished_only`` is false: then any run that is not cancelled or errored)."""
    if not run.base_sha:
        return None
    statuses = COMPARABLE if finished_only else (RunStatus.queued.value, RunStatus.running.value, *COMPARABLE)
    return session.scalar(
        select(Run).where(Run.repository_id == run.repository_id, Run.head_sha == run.base_sha,
                          Run.id != run.id, Run.status.in_(statuses))
        .order_by(Run.id.desc()).limit(1))


def waiting_for_base(session: Session, run: Run) -> Run | None:
    """The unfinished base run this run's report waits for, if any."""
    if not run.base_sha or base_run(session, run) is not None:
        return None
    return base_run(session, run, finished_only=False)


def _cells(session: Session, run_id: int) -> list[dict[str, Any]]:
    rows = session.scalars(select(Result).where(Result.run_id == run_id).order_by(Result.id))
    return [{field: getattr(row, field) for field in CELL_FIELDS} for row in rows]


def _fingerprints(session: Session, run_id: int) -> dict[str, str]:
    rows = session.execute(select(ScenarioCatalogEntry.name, ScenarioCatalogEntry.fingerprint)
                           .where(ScenarioCatalogEntry.run_id == run_id))
    return {name: fingerprint for name, fingerprint in rows}


def _run_cells(session: Session, run: Run) -> RunCells:
    return RunCells(_cells(session, run.id), _fingerprints(session, run.id))


def report_for_run(session: Session, run: Run) -> RunReport:
    base = base_run(session, run)
    project_target, patch_target = parse_report_config(run.config or {})
    subject = ReportSubject(run_id=run.id, run_status=run.status, finished=run.status in FINISHED_RUN_STATUSES,
                            base_run_id=base.id if base else None, head_sha=run.head_sha,
                            base_sha=run.base_sha, pr_number=run.pr_number)
    return build_report(subject, _run_cells(session, run), _run_cells(session, base) if base else None,
                        project_target, patch_target)
