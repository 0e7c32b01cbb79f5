"""The API's error answers, described once.

Every route lists the error statuses it can give with ``responses=errors(...)``, so that its OpenAPI
description matches what it answers (the schemathesis conformance test holds the two together).
"""
from __future__ import annotations

from typing import Any

from pydantic import BaseModel

DESCRIPTIONS = {
    400: "The request is malformed (a cursor this server did not issue, a webhook without its headers, …)",
    401: "Missing or wrong credentials (`Authorization: Bearer <GRADCI_API_TOKEN>`, the webhook signature, "
         "an upload token or id token)",
    403: "Not allowed here (a repository outside GRADCI_ALLOWED_REPOS, an upload credential of another repository)",
    404: "No such run, or no such repository the asker may read",
    409: "The run's state does not allow this (already finished, nothing to rerun, an upload run finished)",
    413: "The body is larger than the server accepts",
    503: "The database or the broker is unavailable; retry later",
}


class ErrorOut(BaseModel):
    detail: str


def errors(*codes: int) -> dict[int | str, dict[str, Any]]:
    """The ``responses`` of a route that answers these error statuses with ``{"detail": "..."}``.

    503 is always among them (a database or broker outage can reach any route).
    """
    return {code: {"model": ErrorOut, "description": DESCRIPTIONS[code]} for code in sorted({*codes, 503})}
