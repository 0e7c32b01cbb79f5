"""A cell's time in a JUnit report: its steady state where it was timed, else its one call (compiling
included) — an untimed cell is not a zero-second test."""
from __future__ import annotations

import xml.etree.ElementTree as ET

from gradci.scenarios.contract.cell import Cell, Status
from gradci.scenarios.contract.formats import cells_to_junit


def cell(name: str, time_ms: float | None, first_call_ms: float | None) -> Cell:
    return Cell(scenario=name, operator="gradient", framework="torch", backend="torch-rev", mode="reverse",
                device="cpu", dtype="float64", status=Status.PASS, time_ms=time_ms, first_call_ms=first_call_ms)


def test_untimed_cells_report_their_one_call():
    root = ET.fromstring(cells_to_junit([cell("timed", 3.0, 50.0), cell("once", None, 12.0), cell("none", None, None)]))
    times = {case.get("name"): case.get("time") for case in root.iter("testcase")}
    assert times == {"timed": "0.003000", "once": "0.012000", "none": "0.000000"}
    assert root.find("testsuite").get("time") == "0.015000"
