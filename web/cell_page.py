"""The cell page: all that was recorded of one cell.

It shows where its scenario is defined, one cell's message, errors against tolerances, its
detection power (where measured), its reference and precision, the spread of its repeats, timings and
memory, the device record of the job that computed it, and links to the same cell in the base run
and to its scenario's history. Cells of older runs lack some of these: the page says "not recorded"
instead.
"""
from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, HTTPException, Path, Request
from fastapi.responses import HTMLResponse
from sqlalchemy import select
from sqlalchemy.orm import Session

from gradci.services.api.access import ReadAccess
from gradci.services.api.deps import ReadSession
from gradci.services.api.runs import RunId
from gradci.services.db import queries
from gradci.services.db.models import Job, Result, Run, ScenarioCatalogEntry, Worker
from gradci.services.db.power import power_of_cell
from gradci.services.reports.diff import stored_tolerance_ratio
from gradci.services.reports.run_report import base_run
from gradci.web.device_record import device_facts
from gradci.web.power_view import cell_row, with_code
from gradci.web.templating import templates

router = APIRouter(include_in_schema=False)
CellId = Annotated[int, Path(ge=1, le=2**63 - 1)]  # results' ids are 64-bit


@router.get("/runs/{run_id}/cells/{cell_id}", response_class=HTMLResponse)
def cell_page(run_id: RunId, cell_id: CellId, request: Request, session: ReadSession, access: ReadAccess):
    run = access.run(run_id)
    cell = queries.get_cell(session, run.id, cell_id)
    if cell is None:
        raise HTTPException(404, detail=f"run {run_id} has no cell {cell_id}")
    base = base_run(session, run)
    job = session.get(Job, cell.job_id) if cell.job_id is not None else None
    worker = session.get(Worker, job.worker) if job is not None and job.worker else None
    power = power_of_cell(session, cell)
    return templates.TemplateResponse(request, "cell.html", {
        "run": run, "cell": cell, "defined_at": definition_site(session, run.id, cell.scenario),
        "ratio": stored_tolerance_ratio(cell), "job": job, "worker": worker,
        "device_facts": device_facts(job.device_record if job else None), "repeats": repeats_text(cell.repeat_spread),
        "base": base, "base_cell": queries.same_cell(session, base.id, cell) if base else None,
        "power": cell_row(cell, power) if power is not None else None, "with_code": with_code,
        "origin_cell": carried_from(session, run, cell)})


def carried_from(session: Session, run: Run, cell: Result) -> Result | None:
    """A carried cell's own row in the run it was carried from (None: fresh, or that run is gone).

    Only a run of the same repository: the link must not lead where this page's reader may not look.
    """
    if cell.carried_run_id is None:
        return None
    origin = session.get(Run, cell.carried_run_id)
    if origin is None or origin.repository_id != run.repository_id:
        return None
    return queries.same_cell(session, origin.id, cell)


def definition_site(session: Session, run_id: int, scenario: str) -> str | None:
    """``path:line`` of the scenario's ``Scenario(...)`` call in the run's checkout, if it was recorded."""
    row = session.execute(select(ScenarioCatalogEntry.file, ScenarioCatalogEntry.line).where(
        ScenarioCatalogEntry.run_id == run_id, ScenarioCatalogEntry.name == scenario)).one_or_none()
    if row is None or row.file is None:
        return None
    return f"{row.file}:{row.line}" if row.line else row.file


def repeats_text(spread: float | None) -> str:
    """What the nondeterminism check found, in words.

    ``repeat_spread`` is the largest difference between repeated results, 0.0 when they were bitwise
    identical, None when the cell was not repeated.
    """
    if spread is None:
        return "not repeated"
    if spread == 0:
        return "bitwise reproducible: repeated results were identical"
    return f"not bitwise reproducible: repeated results differed by up to {spread:.3g}"
