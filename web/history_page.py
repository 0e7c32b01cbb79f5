"""A scenario's history (``/scenarios/{name}``, the name may hold slashes): per backend · device ·
dtype, error ÷ tolerance and time over the last runs that checked it, as plotly line charts."""
from __future__ import annotations

from collections import defaultdict
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import HTMLResponse

from services.api.deps import ReadSession
from services.reports.history import MAX_RUNS_SHOWN, RUNS_SHOWN, HistoryPoint, scenario_history
from services.reports.matrix import MatrixCell
from web import heatmap
from web.status_style import labelled
from web.templating import short_sha, templates

router = APIRouter(include_in_schema=False)
# (chart title, the point's value, the y axis: log for numbers spread over decades)
CHARTS = (("error ÷ tolerance (1 = at the tolerance)", "tolerance_ratio", "log"),
          ("steady-state time (ms)", "time_ms", "log"),
          ("first call: compile and trace (ms)", "first_call_ms", "log"))


def series_label(point: HistoryPoint) -> str:
    return f"{point.backend} · {point.device} · {point.dtype}"


# A click on a point opens its cell (charts.js fills %s with the point's customdata).
CELL_LINK = {"link": "/runs/%s"}


def cell_path(point: HistoryPoint) -> str:
    return f"{point.run_id}/cells/{point.cell_id}"


def significant(value: float | None) -> float | None:
    """Four significant digits: all a chart shows, and a much smaller page of 500 runs."""
    return None if value is None else float(f"{value:.4g}")


def status_chart(points: list[HistoryPoint]) -> dict[str, Any]:
    """The statuses as a heatmap, backend · device · dtype × run, coloured as the run page's matrix:
    what the line charts cannot show (an error has no error ÷ tolerance)."""
    runs = sorted({p.run_id for p in points})
    labels = sorted({series_label(p) for p in points})
    at = {(series_label(p), p.run_id): p for p in points}
    cells = [[at.get((label, run)) for run in runs] for label in labels]
    trace = {"type": "heatmap", "x": [f"#{run}" for run in runs], "y": labels, "xgap": 1, "ygap": 1,
             "z": [[None if p is None else heatmap.cell_value(MatrixCell(p.cell_id, p.status, p.tolerance_ratio))
                    for p in row] for row in cells],
             "text": [["" if p is None else f"{short_sha(p.head_sha)} {labelled(p.status)}" for p in row]
                      for row in cells],
             "customdata": [[None if p is None else cell_path(p) for p in row] for row in cells],
             "hovertemplate": "%{x} %{text}<extra>%{y}</extra>", "colorscale": heatmap.colour_scale(),
             "zmin": 0, "zmax": len(heatmap.BANDS), "showscale": False}
    layout = {"title": {"text": "status per run", "font": {"size": 14}}, "height": 80 + 16 * len(labels),
              "margin": {"l": 10, "r": 10, "t": 40, "b": 30}, "xaxis": {"type": "category"},
              "yaxis": {"automargin": True, "tickfont": {"size": 10}}, "meta": CELL_LINK,
              "font": {"family": "system-ui, sans-serif", "size": 11}}
    return {"data": [trace], "layout": layout}


def line_chart(points: list[HistoryPoint], title: str, value: str, axis: str) -> dict[str, Any]:
    """One line per backend · device · dtype over the runs (x: run id as a category, oldest first);
    each marker's hover names the commit and the status."""
    by_series: dict[str, list[HistoryPoint]] = defaultdict(list)
    for point in points:
        by_series[series_label(point)].append(point)
    data = [{"type": "scatter", "mode": "lines+markers", "name": label,
             "x": [f"#{p.run_id}" for p in series], "y": [significant(getattr(p, value)) for p in series],
             "text": [f"{short_sha(p.head_sha)} {labelled(p.status)}" for p in series],
             "customdata": [cell_path(p) for p in series],
             "hovertemplate": "%{x} %{text}<br>%{y:.3g}<extra>" + label + "</extra>"}
            for label, series in sorted(by_series.items())]
    layout = {"title": {"text": title, "font": {"size": 14}}, "height": 340,
              "margin": {"l": 60, "r": 10, "t": 40, "b": 40},
              "xaxis": {"type": "category"}, "yaxis": {"type": axis},
              "legend": {"orientation": "h", "y": -0.15}, "meta": CELL_LINK, "font": {"family": "system-ui, sans-serif", "size": 11}}
    if value == "tolerance_ratio":
        layout["shapes"] = [{"type": "line", "xref": "paper", "x0": 0, "x1": 1, "y0": 1, "y1": 1,
                             "line": {"color": "#b71c1c", "dash": "dash"}}]
    return {"data": data, "layout": layout}


@router.get("/scenarios/{name:path}", response_class=HTMLResponse)
def history_page(name: Annotated[str, Path(max_length=255)], request: Request, session: ReadSession,
                 runs: Annotated[int, Query(ge=1, le=MAX_RUNS_SHOWN)] = RUNS_SHOWN):
    points = scenario_history(session, name, runs)
    charts = [("chart-status", status_chart(points)),
              *((f"chart-{value}", line_chart(points, title, value, axis)) for title, value, axis in CHARTS)]
    run_ids = sorted({p.run_id for p in points})
    return templates.TemplateResponse(request, "history.html", {
        "name": name, "points": points, "charts": charts, "runs": runs, "max_runs": MAX_RUNS_SHOWN,
        "run_count": len(run_ids), "previous_run": run_ids[-2] if len(run_ids) > 1 else None,
        "latest": [p for p in points if p.run_id == run_ids[-1]]}, status_code=200 if points else 404)
