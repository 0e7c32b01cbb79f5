"""The dashboard: server-rendered pages over the same queries as the REST API (no JavaScript, no CDN)."""
from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import HTMLResponse
from fastapi.templating import Jinja2Templates

from services.api.deps import ReadSession
from services.db import queries
from services.db.queries import ResultFilter
from services.reports.coverage import percent
from services.reports.run_report import report_for_run

templates = Jinja2Templates(directory=str(Path(__file__).parent / "templates"))
templates.env.filters["percent"] = percent  # coverage printed as the PR comment prints it
router = APIRouter(include_in_schema=False)
ORDER = {"fail": 0, "error": 1, "xpass": 2, "pass": 3, "xfail": 4, "skip": 5}


@router.get("/", response_class=HTMLResponse)
def runs_page(request: Request, session: ReadSession):
    page = queries.list_runs(session, limit=50)
    counts = queries.cell_counts(session, [run.id for run in page.items])
    return templates.TemplateResponse(request, "runs.html", {"runs": page.items, "counts": counts})


@router.get("/runs/{run_id}", response_class=HTMLResponse)
def run_page(run_id: int, request: Request, session: ReadSession):
    run = queries.get_run(session, run_id)
    if run is None:
        raise HTTPException(404, detail=f"run {run_id} not found")
    report = report_for_run(session, run)
    cells = queries.list_results(session, run_id, ResultFilter(), limit=5000).items
    cells = sorted(cells, key=lambda c: (ORDER.get(c.status, 9), c.scenario, c.backend, c.dtype))
    return templates.TemplateResponse(request, "run.html", {"run": run, "report": report, "cells": cells})
