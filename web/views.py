"""The dashboard: server-rendered pages over the same queries as the REST API (no JavaScript, no CDN)."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated

from fastapi import APIRouter, HTTPException, Query, Request
from fastapi.responses import HTMLResponse
from fastapi.templating import Jinja2Templates

from services.api.deps import ReadSession
from services.db import queries
from services.reports import finished
from services.reports.coverage import percent
from services.reports.run_report import report_for_run

templates = Jinja2Templates(directory=str(Path(__file__).parent / "templates"))
templates.env.filters["percent"] = percent  # coverage printed as the PR comment prints it
router = APIRouter(include_in_schema=False)
CELLS_PER_PAGE = 100


@router.get("/", response_class=HTMLResponse)
def runs_page(request: Request, session: ReadSession):
    page = queries.list_runs(session, limit=50)
    counts = finished.cell_counts(session, page.items)
    return templates.TemplateResponse(request, "runs.html", {"runs": page.items, "counts": counts})


@router.get("/runs/{run_id}", response_class=HTMLResponse)
def run_page(run_id: int, request: Request, session: ReadSession,
             cursor: Annotated[str | None, Query(max_length=200)] = None):
    """The report's summary, then the cells a page at a time, failures first: bounded however big the run."""
    run = queries.get_run(session, run_id)
    if run is None:
        raise HTTPException(404, detail=f"run {run_id} not found")
    report = report_for_run(session, run)
    cells = queries.results_by_status(session, run_id, limit=CELLS_PER_PAGE, cursor=cursor)
    return templates.TemplateResponse(request, "run.html", {"run": run, "report": report, "cells": cells,
                                                            "first_page": cursor is None})
