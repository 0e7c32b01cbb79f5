"""The dashboard's Jinja2 environment: its templates and the filters they format numbers with."""
from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

from fastapi import Request
from fastapi.templating import Jinja2Templates

from gradci.scenarios.contract.coverage import percent
from gradci.scenarios.contract.wording import plural
from gradci.services.api.sessions import csrf_token, signed_in_login
from gradci.services.reports.diff import stored_tolerance_ratio
from gradci.web import status_style
from gradci.web.static import asset_url


def number(value: float | None, digits: int = 2) -> str:
    """A measured number in ``digits`` significant digits; an em dash when none was recorded."""
    return "—" if value is None else f"{value:.{digits}g}"


def duration(start: datetime | None, end: datetime | None) -> str:
    if start is None or end is None:
        return "—"
    seconds = (end - start).total_seconds()
    return f"{seconds:.1f} s" if seconds < 60 else f"{seconds // 60:.0f} min {seconds % 60:.0f} s"


def short_sha(sha: str | None) -> str:
    return (sha or "")[:7]


def memory(count: int | None) -> str:
    if count is None:
        return "—"
    value = float(count)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def viewer(request: Request) -> dict[str, Any]:
    """Who the page is shown to, for its header.

    The signed-in login (and the CSRF token its sign-out form carries), or whether it may sign in.
    """
    login = signed_in_login(request)
    return {"login": login, "csrf": csrf_token(request) if login else None,
            "can_sign_in": request.app.state.settings.login_configured}


def history_url(scenario: str, repository_id: int | None) -> str:
    """The history page of a scenario of one repository (None: the built-in library)."""
    query = {"repository": repository_id} if repository_id is not None else {}
    return f"/scenarios/{quote(scenario)}" + (f"?{urlencode(query)}" if query else "")


templates = Jinja2Templates(directory=str(Path(__file__).parent / "templates"))
# Embedded figures hold a status icon per cell: as UTF-8 (3 bytes), not as \u escapes (6).
templates.env.policies["json.dumps_kwargs"] = {"sort_keys": True, "ensure_ascii": False}
templates.env.filters.update(percent=percent, number=number, short_sha=short_sha, memory=memory,
                             labelled=status_style.labelled)
templates.env.globals.update(duration=duration, history_url=history_url, viewer=viewer, csrf_token=csrf_token,
                             asset_url=asset_url, plural=plural,
                             ratio_of=stored_tolerance_ratio, text_colours=status_style.TEXT_COLOURS,
                             band_colours=status_style.BAND_COLOURS)
