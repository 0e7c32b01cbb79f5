"""The routes of a run's report and of its jobs.

GET /api/runs/{id}/report: the coverage report (JSON), or the PR comment (?format=markdown);
GET /api/runs/{id}/jobs/{job_id}: a job with the device record of the worker that produced its cells.
"""
from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, HTTPException, Path, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import PlainTextResponse, Response
from pydantic import BaseModel, ConfigDict, Field

from gradci.services.api.access import OPTIONAL_CREDENTIAL, ReadAccess
from gradci.services.api.deps import ReadSession, SettingsDep
from gradci.services.api.errors import errors
from gradci.services.api.runs import MAX_INT32, RunId, run_url
from gradci.services.db.models import Job
from gradci.services.reports.markdown import render
from gradci.services.reports.report_record import RunReport
from gradci.services.reports.run_report import report_for_run
from gradci.services.reports.targets import TargetConfigError

router = APIRouter(prefix="/api/runs", tags=["reports"])


@router.get("/{run_id}/report", response_model=RunReport, responses={
    200: {"content": {"text/markdown": {"schema": {"type": "string"}}},
          "description": "The report as JSON, or with `format=markdown` the pull-request comment"},
    **errors(401, 404),
}, openapi_extra=OPTIONAL_CREDENTIAL)
def get_report(run_id: RunId, request: Request, session: ReadSession, settings: SettingsDep, access: ReadAccess,
               format: Literal["json", "markdown"] = Query("json")) -> RunReport | Response:
    """The run's report against its base run.

    422 (as for an invalid field, ``loc`` naming it) when the repository's gradci.toml has an invalid
    ``[report]`` table.
    """
    run = access.run(run_id)
    try:
        report = report_for_run(session, run)
    except TargetConfigError as exc:
        raise RequestValidationError([{"type": "value_error", "loc": ("gradci.toml", "report"), "msg": str(exc),
                                       "input": None}]) from exc
    if format == "markdown":
        return PlainTextResponse(render(report, run_url(settings, request, run.id)), media_type="text/markdown")
    return report


class JobOut(BaseModel):
    """A job: one backend on one device for a chunk of scenarios; its cells carry its id (``job_id``)."""

    model_config = ConfigDict(from_attributes=True)
    id: int
    run_id: int
    backend: str
    device: str
    queue: str
    status: str
    attempts: int
    worker: str | None
    message: str | None
    started_at: datetime | None
    finished_at: datetime | None
    device_record: dict[str, Any] | None = Field(description=(
        "what the worker that ran the job computed on, as its heartbeat carried it: the device's model, "
        "capability, memory, driver and CUDA versions, the framework versions, and for a GPU the "
        "CUDA_VISIBLE_DEVICES and memory caps of its runner; null before a worker claimed the job"))


@router.get("/{run_id}/jobs/{job_id}", responses=errors(401, 404), openapi_extra=OPTIONAL_CREDENTIAL)
def get_job(run_id: RunId, job_id: Annotated[int, Path(ge=1, le=MAX_INT32, description="job id")],
            session: ReadSession, access: ReadAccess) -> JobOut:
    """One job of the run, with the device record its cells were computed under."""
    access.run(run_id)
    job = session.get(Job, job_id)
    if job is None or job.run_id != run_id:
        raise HTTPException(404, detail=f"run {run_id} has no job {job_id}")
    return JobOut.model_validate(job)
