"""``/badge/{owner}/{repo}.svg``: a README badge of the default branch's gradient coverage.

The coverage is that of the repository's latest finished push run; the badge is a grey "unknown" one
when there is none.

A private repository's badge needs a read token of it in the URL (``?token=``: a README's image
cannot send a header); without one it is the grey badge of a repository gradci knows nothing of, so
that a badge tells no one a private repository exists.

Caches (GitHub's image proxy among them) are told to revalidate every time; the ETag names the run
and its coverage, so an unchanged badge costs a 304.
"""
from __future__ import annotations

from typing import Annotated
from xml.sax.saxutils import escape

from fastapi import APIRouter, Path, Query, Request, Response

from gradci.scenarios.contract.coverage import run_coverage
from gradci.services.access.read_tokens import find_read_token
from gradci.services.api.access import ReadAccess
from gradci.services.api.deps import ReadSession
from gradci.services.db import queries
from gradci.services.reports import finished_counts
from gradci.services.reports.run_report import COMPARABLE

router = APIRouter(include_in_schema=False)
LABEL = "gradient coverage"
UNKNOWN_COLOUR = "#9f9f9f"
# (lowest coverage, colour), highest first: the colours coverage badges commonly use.
THRESHOLDS = ((95.0, "#4c1"), (85.0, "#97ca00"), (70.0, "#dfb317"), (50.0, "#fe7d37"), (0.0, "#e05d44"))
CHAR_PX, PAD_PX = 6.5, 10  # Verdana 11px averages about 6.5 px a character
Segment = Annotated[str, Path(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9_.-]+$")]


def colour(coverage: float | None) -> str:
    if coverage is None:
        return UNKNOWN_COLOUR
    return next(colour for lowest, colour in THRESHOLDS if coverage >= lowest)


def badge_svg(label: str, value: str, value_colour: str) -> str:
    left, right = (round(len(text) * CHAR_PX) + 2 * PAD_PX for text in (label, value))
    width = left + right
    label, value = escape(label), escape(value)
    return f"""<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="20" role="img" aria-label="{label}: {value}">
<title>{label}: {value}</title>
<linearGradient id="s" x2="0" y2="100%"><stop offset="0" stop-color="#bbb" stop-opacity=".1"/><stop offset="1" stop-opacity=".1"/></linearGradient>
<clipPath id="r"><rect width="{width}" height="20" rx="3" fill="#fff"/></clipPath>
<g clip-path="url(#r)"><rect width="{left}" height="20" fill="#555"/><rect x="{left}" width="{right}" height="20" fill="{value_colour}"/><rect width="{width}" height="20" fill="url(#s)"/></g>
<g fill="#fff" text-anchor="middle" font-family="Verdana,Geneva,DejaVu Sans,sans-serif" font-size="11">
<text x="{left / 2}" y="15" fill="#010101" fill-opacity=".3">{label}</text><text x="{left / 2}" y="14">{label}</text>
<text x="{left + right / 2}" y="15" fill="#010101" fill-opacity=".3">{value}</text><text x="{left + right / 2}" y="14">{value}</text></g>
</svg>"""


@router.get("/badge/{owner}/{repo}.svg")
def badge(owner: Segment, repo: Segment, request: Request, session: ReadSession, access: ReadAccess,
          token: Annotated[str | None, Query(max_length=200)] = None) -> Response:
    full_name = f"{owner}/{repo}"
    run = queries.latest_baseline_run(session, full_name, COMPARABLE)
    # Only a repository gradci has runs of is looked up on GitHub: a badge URL is no way to make the
    # service ask GitHub about any name one likes.
    row = find_read_token(session, token) if token and run is not None else None
    if run is not None and not (access.decision.may_read(run.repository) or (
            row is not None and full_name.lower() in {name.lower() for name in row.repositories})):
        run = None
    coverage = run_coverage(run.coverage, finished_counts.cell_counts(session, [run])[run.id]) if run else None
    value = "unknown" if coverage is None else f"{coverage:.1f}%"
    etag = f'"{run.id if run else 0}-{value}"'
    headers = {"Cache-Control": "no-cache", "ETag": etag}
    if request.headers.get("if-none-match") == etag:
        return Response(status_code=304, headers=headers)
    return Response(badge_svg(LABEL, value, colour(coverage)), media_type="image/svg+xml", headers=headers)
