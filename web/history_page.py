"""A scenario's history (``/scenarios/{name}``, the name may hold slashes), as plotly charts.

Per backend · device · dtype, it shows its status, error ÷ tolerance and time over the last runs that
checked it.

500 runs of a scenario are thousands of points: the page ships them once, in columns aligned with the
runs (``history_data``), and history.js turns them into the charts' traces. Strings per point (the
commit, the status, the link) would be repeated in every chart; they are built in the browser.
"""
from __future__ import annotations

import itertools
import math
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Path, Query, Request
from fastapi.responses import HTMLResponse

from gradci.services.api.access import ReadAccess
from gradci.services.api.deps import ReadSession
from gradci.services.db.models import Repository
from gradci.services.reports.history import MAX_RUNS_SHOWN, RUNS_SHOWN, HistoryPoint, ScenarioHistory, scenario_history
from gradci.web import heatmap
from gradci.web.status_style import labelled
from gradci.web.templating import short_sha, templates

router = APIRouter(include_in_schema=False)
# (chart title, the point's value, the y axis: log for numbers spread over decades, what an empty one says)
CHARTS = (("error ÷ tolerance (1 = at the tolerance)", "tolerance_ratio", "log",
           "No error ÷ tolerance to plot: no cell of these runs recorded errors (they errored or were skipped; "
           "the status chart says which)."),
          ("steady-state time (ms)", "time_ms", "log",
           "No steady-state time to plot: no cell of these runs recorded one (cells are timed only where "
           "timings are asked for: [check] timings = true in gradci.toml, or a run's timings)."),
          ("first call: compile and trace (ms)", "first_call_ms", "log",
           "No first-call time to plot: no cell of these runs recorded one."))
FONT = {"family": "system-ui, sans-serif", "size": 11}
# A click on a point opens its cell (charts.js fills %s with the point's customdata, "run/cells/id").
CELL_LINK = {"link": "/runs/%s"}


def series_label(point: HistoryPoint) -> str:
    """"jax-rev · cpu · float64", as the run page's heatmap labels its columns."""
    return heatmap.column_label((point.backend, point.device, point.dtype))


def significant(value: float | None) -> float | None:
    """Four significant digits: all a chart shows, and a much smaller page of 500 runs."""
    if not value or not math.isfinite(value):
        return value
    return round(value, 3 - math.floor(math.log10(abs(value))))


def microseconds(ms: float | None) -> float | None:
    """A time in ms, rounded to the microsecond.

    That is all a chart shows (an integer over 1000 prints short, and costs less than rounding to
    significant digits, which ratios spread over decades need).
    """
    return None if ms is None else int(ms * 1000 + 0.5) / 1000


def history_data(history: ScenarioHistory) -> dict[str, Any]:
    """The charts' data, in lists aligned with the runs.

    The runs (oldest first) and their commits, the series (backend · device · dtype), and per series one
    list aligned with the runs for each of: the cell's id, its heatmap value (its status is the integer
    part, ``statuses`` names it) and each chart's value; None where that run has no such cell or the
    cell recorded no such value.
    """
    column = {run.id: index for index, run in enumerate(history.runs)}
    # Thousands of points: unpacked once each (a row's attributes cost more than its tuple), and the
    # series' rows looked up once.
    points = [(run, cell, (backend, device, dtype), status, ratio, time_ms, first_call)
              for run, cell, backend, device, dtype, status, ratio, time_ms, first_call in history.points]
    keys = sorted({point[2] for point in points})
    row = {key: index for index, key in enumerate(keys)}
    width = len(history.runs)
    empty: list[Any] = [None] * width
    cells, values, ratios, times, first_calls = ([list(empty) for _ in keys] for _ in range(5))
    status_value = heatmap.status_value
    for run_id, cell_id, key, status, ratio, time_ms, first_call in points:
        at, run = row[key], column[run_id]
        cells[at][run] = cell_id
        values[at][run] = status_value(status, ratio)
        ratios[at][run] = significant(ratio)
        times[at][run] = microseconds(time_ms)
        first_calls[at][run] = microseconds(first_call)
    return {"runs": [run.id for run in history.runs], "shas": [short_sha(run.head_sha) for run in history.runs],
            "series": [heatmap.plot_text(heatmap.column_label(key)) for key in keys],
            "statuses": [labelled(status) for status in heatmap.BANDS],
            "cell": cells, "z": values, "tolerance_ratio": ratios, "time_ms": times, "first_call_ms": first_calls}


def charts(data: dict[str, Any]) -> list[dict[str, Any]]:
    """What history.js needs to draw each chart.

    Each chart's id, the trace settings and layout history.js completes with ``data``, and, for a chart
    with nothing to plot, what the page says instead (``empty``).
    """
    status = {"id": "chart-status", "value": None, "empty": None,
              "trace": {"type": "heatmap", "xgap": 1, "ygap": 1, "colorscale": heatmap.colour_scale(), "zmin": 0,
                        "zmax": len(heatmap.BANDS), "showscale": False, "texttemplate": "%{text}",
                        "textfont": {"size": 9}, "hovertemplate": "%{x} %{hovertext}<extra>%{y}</extra>"},
              "layout": {"title": {"text": "status per run", "font": {"size": 14}},
                         "height": 80 + 16 * len(data["series"]), "margin": {"l": 10, "r": 10, "t": 40, "b": 30},
                         "xaxis": {"type": "category"}, "yaxis": {"automargin": True, "tickfont": {"size": 10}},
                         "meta": CELL_LINK, "font": FONT}}
    lines = []
    for title, value, axis, empty in CHARTS:
        plotted = any(v is not None for values in data[value] for v in values)
        layout = {"title": {"text": title, "font": {"size": 14}}, "height": 340,
                  "margin": {"l": 60, "r": 10, "t": 40, "b": 40}, "xaxis": {"type": "category"},
                  "yaxis": {"type": axis}, "legend": {"orientation": "h", "y": -0.15}, "meta": CELL_LINK, "font": FONT}
        if value == "tolerance_ratio":
            layout["shapes"] = [{"type": "line", "xref": "paper", "x0": 0, "x1": 1, "y0": 1, "y1": 1,
                                 "line": {"color": "#b71c1c", "dash": "dash"}}]
        lines.append({"id": f"chart-{value}", "value": value, "empty": None if plotted else empty, "layout": layout,
                      "trace": {"type": "scatter", "mode": "lines+markers",
                                "hovertemplate": "%{x} %{text}<br>%{y:.3g}"}})
    return [status, *lines]


def latest_points(history: ScenarioHistory) -> list[HistoryPoint]:
    """The cells of the newest run, by series: the last points (they come oldest run first)."""
    if not history.runs:
        return []
    newest = history.runs[-1].id
    return sorted(itertools.takewhile(lambda point: point.run_id == newest, reversed(history.points)),
                  key=series_label)


@router.get("/scenarios/{name:path}", response_class=HTMLResponse)
def history_page(name: Annotated[str, Path(max_length=255)], request: Request, session: ReadSession,
                 access: ReadAccess, runs: Annotated[int, Query(ge=1, le=MAX_RUNS_SHOWN)] = RUNS_SHOWN,
                 repository: Annotated[int | None, Query(ge=1, le=2**31 - 1)] = None):
    """``?repository=<id>``: that repository's history of the scenario; without it, the built-in library's."""
    row = session.get(Repository, repository) if repository is not None else None
    if (repository is not None and row is None) or not access.decision.may_read(row):
        raise HTTPException(404, detail=f"no history of {name!r} here")
    history = scenario_history(session, name, runs, repository_id=repository)
    data = history_data(history)
    return templates.TemplateResponse(request, "history.html", {
        "name": name, "repository": row, "history": {"data": data, "charts": charts(data)}, "runs": runs,
        "max_runs": MAX_RUNS_SHOWN,
        "run_count": len(history.runs), "previous_run": history.runs[-2].id if len(history.runs) > 1 else None,
        "latest": latest_points(history)}, status_code=200 if history.points else 404)
