"""Compare two runs (``/runs/{a}/compare/{b}``).

It shows the cells whose status, error ÷ tolerance or time changed from run a to run b, the biggest
changes first, a page at a time.
"""
from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse

from gradci.services.api.access import ReadAccess
from gradci.services.api.deps import ReadSession
from gradci.services.api.runs import RunId
from gradci.services.reports.run_comparison import RATIO_FACTOR, TIME_FACTOR, changed_cells
from gradci.web.templating import templates

router = APIRouter(include_in_schema=False)
CHANGES_PER_PAGE = 100


@router.get("/runs/{before_id}/compare/{after_id}", response_class=HTMLResponse)
def compare_page(before_id: RunId, after_id: RunId, request: Request, session: ReadSession, access: ReadAccess,
                 page: Annotated[int, Query(ge=1, le=1_000_000)] = 1):
    before, after = access.run(before_id), access.run(after_id)
    changes, total = changed_cells(session, before.id, after.id, limit=CHANGES_PER_PAGE,
                                   offset=(page - 1) * CHANGES_PER_PAGE)
    return templates.TemplateResponse(request, "compare.html", {
        "before": before, "after": after, "changes": changes, "total": total, "page": page,
        "pages": max(1, -(-total // CHANGES_PER_PAGE)), "ratio_factor": RATIO_FACTOR, "time_factor": TIME_FACTOR})
