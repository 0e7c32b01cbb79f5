"""GET /api/runs/{id}/report: the coverage report (JSON), or the PR comment (?format=markdown)."""
from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import PlainTextResponse, Response

from services.api.deps import ReadSession, SettingsDep
from services.api.errors import errors
from services.api.runs import RunId, find_run, run_url
from services.reports.markdown import render
from services.reports.model import RunReport
from services.reports.run_report import report_for_run
from services.reports.targets import TargetConfigError

router = APIRouter(prefix="/api/runs", tags=["reports"])


@router.get("/{run_id}/report", response_model=RunReport, responses={
    200: {"content": {"text/markdown": {"schema": {"type": "string"}}},
          "description": "The report as JSON, or with `format=markdown` the pull-request comment"},
    **errors(404),
})
def get_report(run_id: RunId, request: Request, session: ReadSession, settings: SettingsDep,
               format: Literal["json", "markdown"] = Query("json")) -> RunReport | Response:
    """The run's report against its base run; 422 (as for an invalid field, ``loc`` naming it) when
    the repository's gradci.toml has an invalid ``[report]`` table."""
    run = find_run(session, run_id)
    try:
        report = report_for_run(session, run)
    except TargetConfigError as exc:
        raise RequestValidationError([{"type": "value_error", "loc": ("gradci.toml", "report"), "msg": str(exc),
                                       "input": None}]) from exc
    if format == "markdown":
        return PlainTextResponse(render(report, run_url(settings, request, run.id)), media_type="text/markdown")
    return report
