"""Detection power as the dashboard shows it: per cell beside its tolerance and headroom, per rule its weakest catch.

Read from the stored records (``gradci.services.db.power``) and summed per rule by the engine
(``gradci.services.reports.power_report``); every name in them is the repository's, set as text by
the templates' escaping.
"""
from __future__ import annotations

import dataclasses
import re
from typing import Any

from markupsafe import Markup, escape
from sqlalchemy.orm import Session

from gradci.scenarios.rules.power import CAUGHT, MISSED, SCALE, WHAT, output_name
from gradci.scenarios.rules.power import CellPower as CellPowerRecord
from gradci.services.db.models import CellPower, Result, Run
from gradci.services.db.power import cell_powers, latest_power_run
from gradci.services.reports.diff import stored_tolerance_ratio
from gradci.services.reports.power_report import power_summary

SHOWN_CELLS = 500  # measured cells listed on a run's rules page, the weakest detectors first
_SPAN = re.compile(r"`([^`]+)`")


def with_code(text: str) -> Markup:
    """The engine's line ("`bwd`'s second output …") with its backticked names as <code>, the rest escaped."""
    parts = _SPAN.split(str(text))
    return Markup("").join(Markup("<code>{}</code>").format(part) if odd else escape(part)
                           for odd, part in zip([False, True] * len(parts), parts))


@dataclasses.dataclass(frozen=True)
class CellPowerRow:
    """One measured cell: its tolerance and headroom, the smallest δ it caught, what it missed."""

    result: Result
    ratio: float | None  # error ÷ tolerance: the headroom left
    smallest_delta: float | None
    missed: list[str]
    not_measured: str | None
    plants: list[dict[str, Any]]


def cell_row(result: Result, power: CellPower) -> CellPowerRow:
    record = CellPowerRecord.from_dict(power.record)
    plants = [{"rule": p.rule.rsplit("::", 1)[-1], "rule_id": p.rule,
               "where": output_name(p.method, p.output, p.outputs),
               "kind": WHAT.get(p.kind, p.kind), "outcome": p.outcome, "smallest_delta": p.smallest_delta,
               "missed_delta": p.missed_delta if p.kind == SCALE else None, "note": p.note,
               "caught": p.outcome == CAUGHT, "missed": p.outcome == MISSED} for p in record.plants]
    return CellPowerRow(result, stored_tolerance_ratio(result), record.smallest_delta, record.missed(),
                        record.not_measured, plants)


def run_power(session: Session, run: Run) -> dict[str, Any]:
    """What a run's rules page shows of power; where the run measured none, the latest run that did."""
    rows: list[CellPowerRow] = []
    for result, power in cell_powers(session, run.id):
        if len(rows) == SHOWN_CELLS:
            break
        rows.append(cell_row(result, power))
    latest = None if rows else latest_power_run(session, run.repository_id)
    rules = power_summary(session, run.id) if rows else []
    return {"cells": rows, "rules": rules, "shown": SHOWN_CELLS, "latest": latest, "with_code": with_code}
