"""/api/runs: submit, list, inspect, export, cancel and rerun runs."""
from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated

from fastapi import APIRouter, HTTPException, Path, Query, Request
from fastapi import status as http
from fastapi.responses import Response, StreamingResponse
from sqlalchemy.orm import Session

from gradci.scenarios.contract.cell import Status
from gradci.scenarios.contract.coverage import run_coverage
from gradci.services.api.access import OPTIONAL_CREDENTIAL, ReadAccess
from gradci.services.api.deps import ReadSession, SettingsDep, WriteAccess, WriteSession
from gradci.services.api.errors import errors
from gradci.services.api.schemas import (
    SHA_PREFIX_PATTERN,
    CellCounts,
    CellOut,
    ResultsPage,
    RunCreate,
    RunCreated,
    RunOut,
    RunsPage,
    WaitingOut,
    from_row,
)
from gradci.services.broker import dispatch
from gradci.services.db import queries
from gradci.services.db.models import Run, RunStatus, StoredReport
from gradci.services.db.pagination import CURSOR_PATTERN
from gradci.services.db.registry import registered_names
from gradci.services.db.runs import (
    RunAlreadyFinished,
    create_rerun,
    create_run,
    get_or_create_repository,
    mark_run_error,
    request_cancel,
)
from gradci.services.db.session import session_scope
from gradci.services.db.waiting import waiting_by_run
from gradci.services.repo_refs import is_allowed, parse_repo_ref
from gradci.services.reports import finished_counts
from gradci.services.reports.junit import decompressed_chunks, document_name, junit_chunks
from gradci.services.settings import Settings

router = APIRouter(prefix="/api/runs", tags=["runs"])

MAX_INT32 = 2**31 - 1  # the id and pr_number columns are 32-bit: larger values can only be unknown
RunId = Annotated[int, Path(ge=1, le=MAX_INT32, description="run id")]
Name = Annotated[str | None, Query(min_length=1, max_length=255, pattern=r"^[^\x00-\x1f\x7f]*$")]
Cursor = Annotated[str | None, Query(pattern=CURSOR_PATTERN, description="next_cursor of the previous page")]


def run_url(settings: Settings, request: Request, run_id: int) -> str:
    """The run's dashboard page."""
    base = settings.public_url or str(request.base_url)
    return f"{base.rstrip('/')}/runs/{run_id}"


def runs_out(session: Session, runs: list[Run], settings: Settings, request: Request) -> list[RunOut]:
    """Runs with their cell and job counts, from grouped queries for the whole list.

    A finished run's cells are counted once: they never change.
    """
    cells, jobs = finished_counts.cell_counts(session, runs), queries.job_counts(session, [run.id for run in runs])
    waiting = waiting_by_run(session, [run.id for run in runs if jobs[run.id]["queued"]],
                             within_s=settings.worker_online_s)
    out = []
    for run in runs:
        counts = CellCounts(**cells[run.id], queued=jobs[run.id]["queued"], running=jobs[run.id]["running"])
        out.append(from_row(
            RunOut, run, url=run_url(settings, request, run.id), counts=counts,
            waiting=[WaitingOut(job_id=job.job_id, queue=job.queue, reason=job.reason, since=job.since)
                     for job in waiting.get(run.id, [])],
            repo=run.repository.url if run.repository else None,
            repo_full_name=run.repository.full_name if run.repository else None,
            coverage=run_coverage(run.coverage, cells[run.id]),
        ))
    return out


def find_run(session: Session, run_id: int) -> Run:
    run = queries.get_run(session, run_id)
    if run is None:
        raise HTTPException(http.HTTP_404_NOT_FOUND, detail=f"run {run_id} not found")
    return run


def queue_run(session: Session, run: Run, settings: Settings) -> None:
    """Commit the run, then queue its planning (the worker must find the row).

    If the broker is down the run is marked error, not left queued forever, and the client gets a 503.
    """
    session.commit()
    try:
        dispatch.submit_plan(run.id, settings)
    except dispatch.DispatchError as exc:
        mark_run_error(session, run, str(exc))
        session.commit()
        raise HTTPException(http.HTTP_503_SERVICE_UNAVAILABLE, detail=str(exc)) from exc


@router.post("", status_code=http.HTTP_201_CREATED, dependencies=[WriteAccess], responses=errors(401, 403))
def submit_run(body: RunCreate, request: Request, session: WriteSession, settings: SettingsDep) -> RunCreated:
    """Queue a run of a repository at a commit (or of the built-in library when ``repo`` is omitted)."""
    repository = None
    if body.repo is not None:
        ref = parse_repo_ref(body.repo, settings.clone_url_template)  # its form was validated with the body
        if not is_allowed(ref, settings.allowed_repos, registered_names(session)):
            raise HTTPException(http.HTTP_403_FORBIDDEN,
                                detail=f"repository {body.repo!r} is not in GRADCI_ALLOWED_REPOS")
        repository = get_or_create_repository(session, ref.url, ref.full_name)
    run = create_run(
        session,
        repository=repository,
        head_sha=body.sha,
        ref=body.ref,
        matrix=body.matrix(),
        options=body.options(),
    )
    queue_run(session, run, settings)
    return RunCreated(id=run.id, status=run.status, url=run_url(settings, request, run.id))


@router.get("", responses=errors(401), openapi_extra=OPTIONAL_CREDENTIAL)
def list_runs(
    request: Request,
    session: ReadSession,
    access: ReadAccess,
    settings: SettingsDep,
    repo: Annotated[str | None, Query(max_length=2048, pattern=r"^[^\x00-\x1f\x7f]*$",
                                      description="repository URL or owner/name")] = None,
    sha: Annotated[str | None, Query(pattern=SHA_PREFIX_PATTERN, description="head sha or a prefix of it")] = None,
    pr: Annotated[int | None, Query(ge=1, le=MAX_INT32)] = None,
    status: RunStatus | None = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    cursor: Cursor = None,
) -> RunsPage:
    """Newest first; only the runs of repositories the asker may read."""
    where = queries.RunFilter(repo=repo, sha=sha, pr=pr, status=status.value if status else None,
                              visible=access.visible())
    page = queries.list_runs(session, where, limit=limit, cursor=cursor)
    return RunsPage(items=runs_out(session, page.items, settings, request), next_cursor=page.next_cursor)


@router.get("/{run_id}", responses=errors(401, 404), openapi_extra=OPTIONAL_CREDENTIAL)
def get_run(run_id: RunId, request: Request, session: ReadSession, settings: SettingsDep,
            access: ReadAccess) -> RunOut:
    return runs_out(session, [access.run(run_id)], settings, request)[0]


@router.get("/{run_id}/results", responses=errors(401, 404), openapi_extra=OPTIONAL_CREDENTIAL)
def list_results(
    run_id: RunId,
    session: ReadSession,
    access: ReadAccess,
    status: Status | None = None,
    backend: Name = None,
    device: Name = None,
    dtype: Name = None,
    scenario: Annotated[str | None, Query(min_length=1, max_length=255, description="name or glob (* and ?)",
                                          pattern=r"^[^\x00-\x1f\x7f]*$")] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    cursor: Cursor = None,
) -> ResultsPage:
    """The run's cells in the order they were stored."""
    access.run(run_id)
    where = queries.ResultFilter(
        status=status.value if status else None, backend=backend, device=device, dtype=dtype, scenario=scenario
    )
    page = queries.list_results(session, run_id, where, limit=limit, cursor=cursor)
    return ResultsPage(items=[CellOut.model_validate(row) for row in page.items], next_cursor=page.next_cursor)


@router.get("/{run_id}/junit.xml", response_class=StreamingResponse,
            responses={200: {"content": {"application/xml": {}}}, **errors(401, 404)},
            openapi_extra=OPTIONAL_CREDENTIAL)
def get_junit(run_id: RunId, request: Request, session: ReadSession, settings: SettingsDep,
              access: ReadAccess) -> Response:
    """JUnit XML for CI systems that display test reports: one testsuite per backend × device × dtype.

    A finished run's document was rendered once and stored gzipped: it is sent as it is to clients that
    accept gzip (``Content-Encoding: gzip``), inflated piece by piece for the others. A run still in
    progress is streamed as the database returns its cells.
    """
    access.run(run_id)
    stored = session.get(StoredReport, run_id)
    blob = stored.junit_gz if stored is not None else None
    if blob is None:
        return StreamingResponse(_junit_document(settings.database_url, run_id), media_type="application/xml")
    if accepts_gzip(request.headers.get("accept-encoding", "")):
        return Response(blob, media_type="application/xml", headers={"Content-Encoding": "gzip", **VARY})
    return StreamingResponse(decompressed_chunks(blob), media_type="application/xml", headers=VARY)


VARY = {"Vary": "Accept-Encoding"}  # caches keep the two forms apart


def accepts_gzip(accept_encoding: str) -> bool:
    """Whether an ``Accept-Encoding`` header admits gzip (``gzip``, ``*``; not ``gzip;q=0``)."""
    weights = {}
    for part in accept_encoding.lower().split(","):
        coding, _, quality = part.partition(";q=")
        weights[coding.strip()] = quality.strip() or "1"
    weight = weights.get("gzip", weights.get("*", "0"))
    return weight.replace(".", "", 1).isdigit() and float(weight) > 0


def _junit_document(database_url: str, run_id: int) -> Iterator[bytes]:
    # A session of its own: the response is still being written after the request's session closed.
    with session_scope(database_url, readonly=True) as session:
        yield from junit_chunks(session, run_id, document_name(run_id))


@router.post("/{run_id}/cancel", dependencies=[WriteAccess], responses=errors(401, 403, 404, 409))
def cancel_run(run_id: RunId, request: Request, session: WriteSession, settings: SettingsDep) -> RunOut:
    """Drop the run's queued jobs; running jobs stop at their next cell."""
    run = find_run(session, run_id)
    try:
        request_cancel(session, run)
    except RunAlreadyFinished as exc:
        raise HTTPException(http.HTTP_409_CONFLICT, detail=str(exc)) from exc
    session.commit()
    return runs_out(session, [run], settings, request)[0]


@router.post("/{run_id}/rerun", status_code=http.HTTP_201_CREATED, dependencies=[WriteAccess],
             responses=errors(401, 403, 404, 409))
def rerun(run_id: RunId, request: Request, session: WriteSession, settings: SettingsDep) -> RunCreated:
    """A new run of the same commit over the failed, errored and unexpectedly passing cells."""
    run = find_run(session, run_id)
    new_run = create_rerun(session, run)
    if new_run is None:
        raise HTTPException(http.HTTP_409_CONFLICT, detail=f"run {run_id} has no failed or errored cells to rerun")
    queue_run(session, new_run, settings)
    return RunCreated(id=new_run.id, status=new_run.status, url=run_url(settings, request, new_run.id))
