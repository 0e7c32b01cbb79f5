"""What the run page changes: ``POST /runs/{id}/cancel``, the page's own form.

Once the session cookie says who asks, a form another site posts would act as them: the form
carries the session's CSRF token, a request a browser marks as from elsewhere (``Origin``,
``Sec-Fetch-Site``) is refused, and the cookie is SameSite=Lax. Who may cancel: operators, and users
GitHub lets push to the repository.
"""
from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Form, HTTPException, Request
from fastapi.responses import RedirectResponse

from gradci.services.api.access import ReadAccess
from gradci.services.api.deps import WriteSession
from gradci.services.api.runs import RunId
from gradci.services.api.sessions import cross_site, csrf_matches
from gradci.services.db.models import Run
from gradci.services.db.runs import RunAlreadyFinished, request_cancel

router = APIRouter(include_in_schema=False)


def may_cancel(access: ReadAccess, run: Run) -> bool:
    return access.decision.may_cancel(run.repository.full_name if run.repository else None)


@router.post("/runs/{run_id}/cancel")
def cancel_from_page(run_id: RunId, request: Request, access: ReadAccess, session: WriteSession,
                     csrf: Annotated[str, Form(max_length=100)] = ""):
    if cross_site(request) or not csrf_matches(request, csrf):
        raise HTTPException(403, detail="this form is not from this site's page (CSRF token missing or wrong)")
    run = access.run(run_id)
    if not may_cancel(access, run):
        raise HTTPException(403, detail="cancelling needs push access to the repository, or an operator")
    try:
        request_cancel(session, session.get_one(Run, run.id))  # the run again, in the session that writes
    except RunAlreadyFinished as exc:
        raise HTTPException(409, detail=str(exc)) from exc
    session.commit()
    return RedirectResponse(f"/runs/{run.id}", status_code=303)
