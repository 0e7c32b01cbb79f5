"""The report of a stored run: its cells against those of the latest finished run of its base commit."""
from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from gradci.services.db.models import FINISHED_RUN_STATUSES, Run, RunStatus, StoredReport, utcnow
from gradci.services.db.queries import cell_counts, without_jit
from gradci.services.reports.aggregates import changed_scenarios, group_tallies, missing_cells
from gradci.services.reports.diff import Changes, compare
from gradci.services.reports.finished_counts import is_final
from gradci.services.reports.junit import compressed_junit
from gradci.services.reports.power_report import power_section
from gradci.services.reports.pr_report import RunFigures, build_report
from gradci.services.reports.report_record import (
    LIST_LIMIT,
    CarriedSection,
    ReportSubject,
    RunReport,
    StatusCounts,
)
from gradci.services.reports.rules_report import rules_section
from gradci.services.reports.run_grid import layout_record
from gradci.services.reports.targets import parse_report_config

COMPARABLE = (RunStatus.passed.value, RunStatus.failed.value)
REASONS_SHOWN = 5  # re-run reasons a report lists (the run's page lists those stored)


def base_run(session: Session, run: Run, finished_only: bool = True) -> Run | None:
    """The latest run of the same repository at ``run.base_sha``.

    Finished with results, unless ``finished_only`` is false: then any run that is not cancelled or
    errored.
    """
    if not run.base_sha:
        return None
    statuses = COMPARABLE if finished_only else (RunStatus.queued.value, RunStatus.running.value, *COMPARABLE)
    return session.scalar(
        select(Run).where(Run.repository_id == run.repository_id, Run.head_sha == run.base_sha,
                          Run.id != run.id, Run.status.in_(statuses))
        .order_by(Run.id.desc()).limit(1))


def base_runs(session: Session, runs: list[Run]) -> dict[int, Run]:
    """``base_run`` of each of ``runs`` that has one, in one statement: a page of runs' bases."""
    wanted = {(run.repository_id, run.base_sha) for run in runs if run.base_sha}
    if not wanted:
        return {}
    found: dict[tuple[int | None, str | None], Run] = {}
    candidates = session.scalars(select(Run).where(Run.head_sha.in_({sha for _, sha in wanted}),
                                                   Run.status.in_(COMPARABLE)).order_by(Run.id.desc()))
    for candidate in candidates:
        found.setdefault((candidate.repository_id, candidate.head_sha), candidate)
    return {run.id: base for run in runs
            if (base := found.get((run.repository_id, run.base_sha))) is not None and base.id != run.id}


def waiting_for_base(session: Session, run: Run) -> Run | None:
    """The unfinished base run this run's report waits for, if any."""
    if not run.base_sha or base_run(session, run) is not None:
        return None
    return base_run(session, run, finished_only=False)


def _figures(session: Session, run: Run, base: Run | None) -> RunFigures:
    base_id = base.id if base else None
    base_counts = StatusCounts.of_tally(cell_counts(session, [base.id])[base.id]) if base else None
    changed, changed_count = changed_scenarios(session, run.id, base_id, LIST_LIMIT)
    return RunFigures(
        tallies=group_tallies(session, run.id, base_id),
        missing=missing_cells(session, run.id, LIST_LIMIT),
        base_counts=base_counts if base_counts and base_counts.total else None,
        changed_scenarios=changed, changed_scenario_count=changed_count,
        changes=compare(session, run.id, base.id, LIST_LIMIT) if base else Changes.none(),
    )


def report_for_run(session: Session, run: Run) -> RunReport:
    """The run's report, stored or computed from aggregates.

    The one stored when it was finalised, if it was compared with the base it has now; otherwise
    computed from aggregates the database computes — a handful of statements whatever the number of
    cells, and never more than ``LIST_LIMIT`` cells of each list in memory.
    """
    base = base_run(session, run)
    if is_final(run):
        stored = session.get(StoredReport, run.id)
        if stored is not None and stored.base_run_id == (base.id if base else None):
            return RunReport.model_validate(stored.report)
    return _compute(session, run, base)


def store_report(session: Session, run: Run) -> None:
    """Compute a finished run's report and keep it.

    Done when the run, or its base run, is finalised: a finished run's report against a finished base
    never changes.
    """
    if not is_final(run):
        return
    base = base_run(session, run)
    report = _compute(session, run, base).model_dump(mode="json")
    stored = session.get(StoredReport, run.id)
    if stored is None:
        stored = StoredReport(run_id=run.id)
        session.add(stored)
    stored.base_run_id, stored.report, stored.computed_at = base.id if base else None, report, utcnow()
    if stored.matrix_layout is None:  # the dashboard's: it depends on the run's final cells alone
        stored.matrix_layout = layout_record(session, run.id)
    if stored.junit_gz is None:  # likewise: rendered once, served whole (gzip) however many cells
        stored.junit_gz = compressed_junit(session, run.id)


def _compute(session: Session, run: Run, base: Run | None) -> RunReport:
    project_target, patch_target = parse_report_config(run.config or {})
    without_jit(session)
    subject = ReportSubject(run_id=run.id, run_status=run.status, finished=run.status in FINISHED_RUN_STATUSES,
                            base_run_id=base.id if base else None, head_sha=run.head_sha,
                            base_sha=run.base_sha, pr_number=run.pr_number)
    report = build_report(subject, _figures(session, run, base), project_target, patch_target,
                          rules=rules_section(session, run, base))
    # Beside the verdict, never in it: no status reads it.
    return report.model_copy(update={"power": power_section(session, run), "carried": carried_section(run.carry)})


def carried_section(carry: dict | None) -> CarriedSection | None:
    """The report's carried line from what the plan stored (``Run.carry``)."""
    if not carry:
        return None
    return CarriedSection.model_validate({**carry, "reasons": list(carry.get("reasons") or ())[:REASONS_SHOWN]})
