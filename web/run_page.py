"""The run page: the report's headline, the matrix as a heatmap and the cells as a table.

The headline gives the coverage and the diff against the base. The heatmap and the table are both
filtered server-side and a bounded page at a time, failures first. Also the small JSON the page
polls while the run is queued or running.
"""
from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Hashable
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse
from pydantic import Field, StringConstraints
from sqlalchemy.orm import Session

from gradci.scenarios.contract.cell import Status
from gradci.scenarios.contract.coverage import percent, run_coverage
from gradci.services.api.access import ReadAccess
from gradci.services.api.deps import ReadSession, SettingsDep
from gradci.services.api.runs import RunId
from gradci.services.db import queries
from gradci.services.db.models import FINISHED_RUN_STATUSES, JobStatus, Run
from gradci.services.db.waiting import waiting_jobs
from gradci.services.reports import finished_counts
from gradci.services.reports.run_grid import MatrixPage, cell_progress, filter_choices, matrix_page
from gradci.services.reports.run_report import report_for_run
from gradci.services.reports.targets import TargetConfigError
from gradci.web import heatmap
from gradci.web.cell_query import FILTERS, CellQuery
from gradci.web.run_actions import may_cancel
from gradci.web.templating import templates

router = APIRouter(include_in_schema=False)
CELLS_PER_PAGE = 100
POLL_INTERVAL_MS = 3000
WAITING_SHOWN = 20  # of the run's jobs waiting for a device, the oldest listed
_JOB_OVER = (JobStatus.done.value, JobStatus.error.value, JobStatus.cancelled.value)


def job_progress(jobs: dict[str, int]) -> dict[str, int]:
    """Of a run's jobs (a count per job status), how many are over (done, errored or cancelled)."""
    return {"over": sum(jobs[status] for status in _JOB_OVER), "total": sum(jobs.values())}


@dataclasses.dataclass(frozen=True)
class Progress:
    """Where a run stands, in a few counts a poll can compare.

    Its status, cells per status and jobs over, and (running) the state of its cells
    (matrix.cell_progress), which keys its heatmap's layout. ``token`` names all of it: a poll that
    sends the token it last saw is told "unchanged" for the price of these few counts.
    """

    status: str
    counts: dict[str, int]
    jobs: dict[str, int]
    cells: Hashable | None

    @property
    def token(self) -> str:
        state = repr((self.status, self.counts, self.jobs, self.cells)).encode()
        return hashlib.blake2b(state, digest_size=8).hexdigest()


def run_progress(session: Session, run: Run) -> Progress:
    counts = finished_counts.cell_counts(session, [run])[run.id]
    jobs = job_progress(queries.job_counts(session, [run.id])[run.id])
    cells = None if run.status in FINISHED_RUN_STATUSES else cell_progress(session, run.id, counts)
    return Progress(run.status, counts, jobs, cells)


def live_state(run: Run, progress: Progress, matrix: MatrixPage) -> dict[str, Any]:
    """What the page shows that moves while the run runs: status, counts, jobs, the heatmap."""
    return {
        "token": progress.token,
        "status": run.status,
        "live": run.status not in FINISHED_RUN_STATUSES,
        "counts": progress.counts,
        "coverage": percent(run_coverage(run.coverage, progress.counts)),
        "jobs": progress.jobs,
        "matrix": {"rows": matrix.total_rows, "page": matrix.page, "pages": matrix.pages},
        "figure": heatmap.figure(matrix, run.id),
    }


@router.get("/runs/{run_id}", response_class=HTMLResponse)
def run_page(run_id: RunId, request: Request, session: ReadSession, settings: SettingsDep, access: ReadAccess,
             query: Annotated[CellQuery, Query()]):
    run = access.run(run_id)
    try:
        report, report_error = report_for_run(session, run), None
    except TargetConfigError as exc:
        report, report_error = None, f"gradci.toml's [report] table: {exc}"
    progress = run_progress(session, run)
    matrix = matrix_page(session, run, query.where(), query.page, progress=progress.cells)
    cells = queries.results_by_status(session, run.id, where=query.where(), limit=CELLS_PER_PAGE, cursor=query.cursor)
    return templates.TemplateResponse(request, "run.html", {
        "run": run, "report": report, "report_error": report_error, "state": live_state(run, progress, matrix),
        "cells": cells, "query": query, "filters": FILTERS, "matrix": matrix, "poll_interval_ms": POLL_INTERVAL_MS,
        "choices": {**filter_choices(session, run, progress.cells), "status": list(Status.values())},
        "can_cancel": run.status not in FINISHED_RUN_STATUSES and may_cancel(access, run),
        "waiting_shown": WAITING_SHOWN, "waiting": [] if run.status in FINISHED_RUN_STATUSES else waiting_jobs(
            session, within_s=settings.worker_online_s, run_ids=[run.id], limit=WAITING_SHOWN)})


class LiveQuery(CellQuery):
    since: Annotated[str, StringConstraints(max_length=32)] | None = Field(
        None, description="the token of the state the page shows now")


@router.get("/runs/{run_id}/live.json")
def run_live(run_id: RunId, session: ReadSession, access: ReadAccess,
             query: Annotated[LiveQuery, Query()]) -> dict[str, Any]:
    run = access.run(run_id)
    progress = run_progress(session, run)
    if query.since == progress.token:
        return {"token": progress.token, "unchanged": True}
    return live_state(run, progress, matrix_page(session, run, query.where(), query.page, progress=progress.cells))
