"""/api/repos/{owner}/{repo}/options: a repository's options, read by its readers, changed by the operator.

The same options ``gradci repos power on|off`` sets (``gradci.services.db.repository_options``),
registered repository or not. Changing them is a write like any other of the API (the operator's
token); reading them is reading the repository, with the answer its runs give anyone who may not:
404, as if gradci knew nothing of it.
"""
from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, HTTPException, Path
from fastapi import status as http
from sqlalchemy.orm import Session

from gradci.services.api.access import OPTIONAL_CREDENTIAL, ReadAccess
from gradci.services.api.deps import ReadSession, WriteAccess, WriteSession
from gradci.services.api.errors import errors
from gradci.services.api.schemas import RepositoryOptionsChange, RepositoryOptionsOut
from gradci.services.db.repository_options import is_known, options_of, set_power

router = APIRouter(prefix="/api/repos", tags=["repositories"])
Segment = Annotated[str, Path(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9_.-]+$")]


def _options(session: Session, full_name: str) -> RepositoryOptionsOut:
    return RepositoryOptionsOut(repository=full_name.lower(), **options_of(session, full_name))


@router.get("/{owner}/{repo}/options", responses=errors(401, 404), openapi_extra=OPTIONAL_CREDENTIAL)
def get_options(owner: Segment, repo: Segment, session: ReadSession, access: ReadAccess) -> RepositoryOptionsOut:
    """The repository's options, for those who may read its runs."""
    full_name = f"{owner}/{repo}"
    decision = access.decision
    if not (decision.sees_everything or (is_known(session, full_name) and decision.may_read_github(full_name))):
        raise HTTPException(http.HTTP_404_NOT_FOUND, detail=f"repository {full_name} not found")
    return _options(session, full_name)


@router.patch("/{owner}/{repo}/options", dependencies=[WriteAccess], responses=errors(401, 403))
def change_options(owner: Segment, repo: Segment, change: RepositoryOptionsChange,
                   session: WriteSession) -> RepositoryOptionsOut:
    """Change the repository's options (``Authorization: Bearer <GRADCI_API_TOKEN>``); the others stay."""
    full_name = f"{owner}/{repo}"
    if change.power is not None:
        set_power(session, full_name, change.power)
    session.commit()
    return _options(session, full_name)
