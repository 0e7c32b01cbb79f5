"""The run page: the report's headline (coverage, the diff against the base), the matrix as a heatmap
and the cells as a table, both filtered server-side and a bounded page at a time, failures first; and
the small JSON the page polls while the run is queued or running."""
from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Query, Request
from fastapi.responses import HTMLResponse
from sqlalchemy.orm import Session

from services.api.deps import ReadSession
from services.api.runs import RunId
from services.db import queries
from services.db.models import FINISHED_RUN_STATUSES, CellStatus, JobStatus, Run
from services.reports import finished
from services.reports.coverage import percent, run_coverage
from services.reports.matrix import MatrixPage, filter_choices, matrix_page
from services.reports.run_report import report_for_run
from services.reports.targets import TargetConfigError
from web import heatmap
from web.cell_query import FILTERS, CellQuery
from web.templating import templates

router = APIRouter(include_in_schema=False)
CELLS_PER_PAGE = 100
POLL_INTERVAL_MS = 3000
_JOB_OVER = (JobStatus.done.value, JobStatus.error.value, JobStatus.cancelled.value)


def run_or_404(session: Session, run_id: int) -> Run:
    run = queries.get_run(session, run_id)
    if run is None:
        raise HTTPException(404, detail=f"run {run_id} not found")
    return run


def job_progress(jobs: dict[str, int]) -> dict[str, int]:
    """Of a run's jobs (a count per job status), how many are over (done, errored or cancelled)."""
    return {"over": sum(jobs[status] for status in _JOB_OVER), "total": sum(jobs.values())}


def live_state(session: Session, run: Run, matrix: MatrixPage) -> dict[str, Any]:
    """What the page shows that moves while the run runs: status, counts, jobs, the heatmap."""
    jobs = queries.job_counts(session, [run.id])[run.id]
    counts = finished.cell_counts(session, [run])[run.id]
    return {
        "status": run.status,
        "live": run.status not in FINISHED_RUN_STATUSES,
        "counts": counts,
        "coverage": percent(run_coverage(run.coverage, counts)),
        "jobs": job_progress(jobs),
        "matrix": {"rows": matrix.total_rows, "page": matrix.page, "pages": matrix.pages},
        "figure": heatmap.figure(matrix, run.id),
    }


@router.get("/runs/{run_id}", response_class=HTMLResponse)
def run_page(run_id: RunId, request: Request, session: ReadSession, query: Annotated[CellQuery, Query()]):
    run = run_or_404(session, run_id)
    try:
        report, report_error = report_for_run(session, run), None
    except TargetConfigError as exc:
        report, report_error = None, f"gradci.toml's [report] table: {exc}"
    matrix = matrix_page(session, run, query.where(), query.page)
    cells = queries.results_by_status(session, run.id, where=query.where(), limit=CELLS_PER_PAGE, cursor=query.cursor)
    return templates.TemplateResponse(request, "run.html", {
        "run": run, "report": report, "report_error": report_error, "state": live_state(session, run, matrix),
        "cells": cells, "query": query, "filters": FILTERS, "matrix": matrix, "poll_interval_ms": POLL_INTERVAL_MS,
        "choices": {**filter_choices(session, run), "status": list(CellStatus.values())}})


@router.get("/runs/{run_id}/live.json")
def run_live(run_id: RunId, session: ReadSession, query: Annotated[CellQuery, Query()]) -> dict[str, Any]:
    run = run_or_404(session, run_id)
    return live_state(session, run, matrix_page(session, run, query.where(), query.page))
