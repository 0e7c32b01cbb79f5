"""How each cell status looks on every page.

An icon and a word beside the colour (readable without colour), and the two colours its heatmap band
runs between (little to much of the tolerance used).
"""
from __future__ import annotations

from gradci.scenarios.contract.cell import STATUSES

ICONS = {"pass": "✔", "fail": "✘", "error": "⚠", "skip": "–", "xfail": "○", "xpass": "‼"}
# Each status's band of the heatmap's colour scale, as (position in the band, colour) stops, pale to
# strong. A passing cell is green however little of its tolerance it used, and turns amber as it
# nears the tolerance: near misses (over half of it) stand out among the greens.
BAND_COLOURS = {
    "pass": ((0.0, "#e8f5e9"), (0.75, "#66bb6a"), (0.9, "#2e7d32"), (1.0, "#f2a900")),
    "xfail": ((0.0, "#cfd8dc"), (1.0, "#90a4ae")),
    "skip": ((0.0, "#e0e0e0"), (1.0, "#bdbdbd")),
    "xpass": ((0.0, "#ffb74d"), (1.0, "#e65100")),
    "error": ((0.0, "#9c4dcc"), (1.0, "#4a0072")),
    "fail": ((0.0, "#ef9a9a"), (1.0, "#b71c1c")),
}
# A page's text colour for each status (the table, the counts): dark enough to read on white.
TEXT_COLOURS = {"pass": "#1b5e20", "fail": "#b71c1c", "error": "#4a0072", "skip": "#616161", "xfail": "#546e7a",
                "xpass": "#bf360c"}
assert set(ICONS) == set(BAND_COLOURS) == set(TEXT_COLOURS) == set(STATUSES)


def labelled(status: str) -> str:
    """"✘ fail": the status as every page prints it."""
    return f"{ICONS.get(status, '?')} {status}"
