"""A page of a run's matrix as a plotly heatmap figure (plain JSON for plotly.js).

Colour says the status and intensity how much of its tolerance the cell used: each status owns one
band of the colour scale, and a cell's value is its band plus its intensity within it. Errors spread
over decades, so intensity is logarithmic: 1e-4 of the tolerance (or less) is pale, all of it is the
band's strong end — for a passing cell amber, so that near misses stand out among the greens.

Plotly reads a subset of HTML in every string it draws (``<a href>``, ``<b>``, ``<br>``, entities), so
labels a repository chooses (scenario names, backends, devices, dtypes) go through ``plot_text``.
"""
from __future__ import annotations

import html
import math
from typing import Any

from gradci.services.reports.run_grid import Column, MatrixCell, MatrixPage, family_of
from gradci.web.status_style import BAND_COLOURS, ICONS, labelled

BANDS = tuple(BAND_COLOURS)  # a status's band: its index here
DECADES = 4  # the intensity scale spans 1e-4 … 1 of the tolerance (of a failing cell: 1 … 1e4)
_EDGE = 1e-6
ROW_PX, MARGIN_PX = 14, 170


def intensity(status: str, ratio: float | None) -> float:
    """How strongly a cell is drawn, from 0 (pale) to 1 (strong).

    A passing cell: how close to its tolerance (``ratio``); a failing one: how far over; a cell with no
    errors recorded (an error, a skip) is drawn strong, since nothing says otherwise.
    """
    if ratio is None or ratio <= 0 or math.isnan(ratio):
        return 1.0 if ratio is None else 0.0
    decades = math.log10(ratio) if status == "fail" else math.log10(ratio) + DECADES
    return min(max(decades / DECADES, 0.0), 1.0)


def colour_scale() -> list[list[Any]]:
    scale: list[list[Any]] = []
    for band, stops in enumerate(BAND_COLOURS.values()):
        # A band's last stop sits just below the next band's first: sharp boundaries between statuses.
        scale += [[(band + min(position, 1 - _EDGE)) / len(BANDS), colour] for position, colour in stops]
    scale[-1][0] = 1.0
    return scale


def column_label(column: Column) -> str:
    return " · ".join(column)


def plot_text(text: str) -> str:
    """``text`` as plotly draws it literally, never as a tag.

    ``<``, ``>`` and ``&`` become entities, which plotly shows as the characters (an ``<a href>`` in a
    scenario name is no link).
    """
    return html.escape(text, quote=False)


_LABELS = {status: labelled(status) for status in BANDS}
_BAND_OF = {status: band for band, status in enumerate(BANDS)}


def cell_hover(cell: MatrixCell) -> str:
    """"✘ fail 3.1": the status in words and how much of its tolerance the cell used."""
    label = _LABELS[cell.status]
    return label if cell.tolerance_ratio is None else f"{label} {cell.tolerance_ratio:.2g}"


def status_value(status: str, ratio: float | None) -> float:
    """A cell's place on the colour scale: its status's band plus its intensity within it.

    In three decimals (a smaller page; the eye sees fewer), the strongest kept below the next band.
    """
    return round(_BAND_OF[status] + intensity(status, ratio) * 0.999, 3)


def cell_value(cell: MatrixCell) -> float:
    return status_value(cell.status, cell.tolerance_ratio)


def figure(matrix: MatrixPage, run_id: int) -> dict[str, Any]:
    """The heatmap for ``Plotly.react``, as ``{"data": [...], "layout": {...}}``.

    Cells carry their id as customdata, and a click opens the cell (``layout.meta.link``, see
    charts.js).
    """
    z, ids, hover, icons = [], [], [], []
    for scenario in matrix.rows:
        cells = [matrix.cells.get((scenario, column)) for column in matrix.columns]
        z.append([None if c is None else cell_value(c) for c in cells])
        ids.append([None if c is None else c.id for c in cells])
        hover.append(["no cell" if c is None else cell_hover(c) for c in cells])
        icons.append(["" if c is None or c.status == "pass" else ICONS[c.status] for c in cells])
    families = [plot_text(family_of(scenario)) for scenario in matrix.rows]
    names = [plot_text(scenario.split("/", 1)[-1]) for scenario in matrix.rows]
    trace = {
        "type": "heatmap", "x": [plot_text(column_label(c)) for c in matrix.columns], "y": [families, names], "z": z,
        # Each cell but a passing one shows its status's icon (readable without colour: a fail and an
        # error are both dark in grey; an icon on every cell more than doubles the time a browser
        # takes to draw a page of 5,600, and passes are most); the hover says it in words with the
        # share of the tolerance used.
        "customdata": ids, "text": icons, "texttemplate": "%{text}", "textfont": {"size": 9}, "hovertext": hover,
        "hovertemplate": "%{y}<br>%{x}<br>%{hovertext}<extra>status, error ÷ tolerance</extra>",
        "colorscale": colour_scale(), "zmin": 0, "zmax": len(BANDS), "showscale": False, "xgap": 1, "ygap": 1,
    }
    layout = {
        "height": MARGIN_PX + ROW_PX * max(len(matrix.rows), 4),
        "margin": {"l": 10, "r": 10, "t": 150, "b": 10},
        "xaxis": {"side": "top", "tickangle": -50, "automargin": True, "fixedrange": True},
        "yaxis": {"autorange": "reversed", "automargin": True, "fixedrange": True, "tickfont": {"size": 10}},
        "font": {"family": "system-ui, sans-serif", "size": 11},
        "meta": {"link": f"/runs/{run_id}/cells/%s"},
    }
    return {"data": [trace], "layout": layout}
