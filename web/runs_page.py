"""The runs page (``/``): the newest runs first, a page at a time.

They are filtered by repository, status and trigger; each shows its coverage and the change against
its base run, and its progress.
"""
from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse
from pydantic import StringConstraints

from gradci.scenarios.contract.coverage import run_coverage
from gradci.services.api.access import ReadAccess
from gradci.services.api.deps import ReadSession
from gradci.services.db import queries
from gradci.services.db.models import RunStatus, Trigger
from gradci.services.reports import finished_counts
from gradci.services.reports.run_report import base_runs
from gradci.web.form_query import FormQuery
from gradci.web.run_page import job_progress
from gradci.web.templating import templates

router = APIRouter(include_in_schema=False)
RUNS_PER_PAGE = 50


class RunsQuery(FormQuery):
    repo: Annotated[str, StringConstraints(max_length=2048, pattern=r"^[^\x00-\x1f\x7f]*$")] | None = None
    status: RunStatus | None = None
    trigger: Trigger | None = None
    cursor: Annotated[str, StringConstraints(max_length=40)] | None = None


@router.get("/", response_class=HTMLResponse)
def runs_page(request: Request, session: ReadSession, access: ReadAccess, query: Annotated[RunsQuery, Query()]):
    where = queries.RunFilter(visible=access.visible(), repo=query.repo, status=query.status and query.status.value,
                              trigger=query.trigger and query.trigger.value)
    page = queries.list_runs(session, where, limit=RUNS_PER_PAGE, cursor=query.cursor)
    runs = page.items
    counts = finished_counts.cell_counts(session, runs)
    jobs = queries.job_counts(session, [run.id for run in runs])
    bases = base_runs(session, runs)
    base_counts = finished_counts.cell_counts(session, list(bases.values()))
    rows = []
    for run in runs:
        coverage = run_coverage(run.coverage, counts[run.id])
        base = bases.get(run.id)
        base_coverage = run_coverage(base.coverage, base_counts[base.id]) if base else None
        rows.append({"run": run, "counts": counts[run.id], "coverage": coverage, "base": base,
                     "change": None if coverage is None or base_coverage is None else coverage - base_coverage,
                     "jobs": job_progress(jobs[run.id])})
    return templates.TemplateResponse(request, "runs.html", {
        "rows": rows, "query": query, "next_cursor": page.next_cursor,
        "statuses": RunStatus.values(), "triggers": Trigger.values()})
