"""Machine-readable reports of a check: JSON (a list of Cell dicts) and JUnit XML.

JUnit: one testsuite per backend × device × dtype, one testcase per scenario. fail and xpass are
failures (xpass: a declared expected failure no longer fails), error is an error, skip and xfail
are skipped — the same split ``gradci check`` uses for its exit code. The service's
``/api/runs/{id}/junit.xml`` writes stored rows through the same function.
"""
from __future__ import annotations

import itertools
import json
import re
import xml.etree.ElementTree as ET
from collections.abc import Iterable
from typing import Any

from gradci.scenarios.contract.cell import Cell


def cells_to_json(cells: Iterable[Cell]) -> str:
    return json.dumps([cell.to_dict() for cell in cells], indent=2)


def cells_to_junit(cells: Iterable[Cell], name: str = "gradci") -> str:
    """The JUnit XML of a local check (cells in any order)."""
    grouped = sorted(cells, key=lambda c: (c.backend, c.device, c.dtype))  # stable: scenario order kept
    return junit_xml(name, grouped).decode()


# XML 1.0 cannot carry most control characters, and tracebacks in messages sometimes do.
_NOT_XML = re.compile("[^\u0009\u000a\u000d\u0020-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
# (child element, JUnit counter it increments, message prefix) per cell status; pass has none.
# Public, with JUNIT_COUNTERS, junit_testcase and xml_text: services.reports.junit streams the
# same testcases for a stored run.
JUNIT_OUTCOMES = {
    "fail": ("failure", "failures", ""),
    "xpass": ("failure", "failures", "unexpectedly passed (declared as an expected failure)"),
    "error": ("error", "errors", ""),
    "skip": ("skipped", "skipped", ""),
    "xfail": ("skipped", "skipped", "expected failure"),
}
JUNIT_COUNTERS = ("tests", "failures", "errors", "skipped")


def xml_text(value: str) -> str:
    return _NOT_XML.sub("\ufffd", value)


def cell_ms(result: Any) -> float:
    """A cell's time for a test report.

    Its steady state where it was timed, else its one call (compiling included; a cell is timed only
    where timings are asked for or cost nothing).
    """
    for value in (result.time_ms, getattr(result, "first_call_ms", None)):
        if value is not None:
            return float(value)
    return 0.0


def _seconds(time_ms: float) -> str:
    return f"{time_ms / 1000:.6f}"


def junit_testcase(suite: ET.Element, suite_name: str, result: Any) -> str | None:
    """Append the result's testcase; returns the counter its outcome increments, if any."""
    case = ET.SubElement(suite, "testcase", name=xml_text(result.scenario), classname=xml_text(suite_name),
                         time=_seconds(cell_ms(result)))
    outcome = JUNIT_OUTCOMES.get(result.status)
    if outcome is None:
        return None
    element, counter, prefix = outcome
    message = xml_text(": ".join(part for part in (prefix, result.message or "") if part) or result.status)
    child = ET.SubElement(case, element, message=message.splitlines()[0][:500] if message else "", type=result.status)
    if element != "skipped":
        child.text = message
    return counter


def junit_xml(name: str, results: Iterable[Any]) -> bytes:
    """The JUnit XML document, named ``name``, of the cells in ``results``.

    ``results`` (Cells, or anything with their attributes) must arrive grouped by (backend, device,
    dtype). A stored run's document is streamed by ``gradci.services.reports.junit`` instead.
    """
    root = ET.Element("testsuites", name=name)
    totals: dict[str, int] = dict.fromkeys(JUNIT_COUNTERS, 0)  # keyed by any counter junit_testcase names
    total_time = 0.0
    for (backend, device, dtype), group in itertools.groupby(results, key=lambda r: (r.backend, r.device, r.dtype)):
        name = f"{backend}.{device}.{dtype}"
        suite = ET.SubElement(root, "testsuite", name=xml_text(name))
        counts: dict[str, int] = dict.fromkeys(JUNIT_COUNTERS, 0)
        suite_time = 0.0
        for result in group:
            counts["tests"] += 1
            counter = junit_testcase(suite, name, result)
            if counter:
                counts[counter] += 1
            suite_time += cell_ms(result) / 1000
        suite.set("time", f"{suite_time:.6f}")
        for key, value in counts.items():
            suite.set(key, str(value))
            totals[key] += value
        total_time += suite_time
    for key, value in totals.items():
        root.set(key, str(value))
    root.set("time", f"{total_time:.6f}")
    return ET.tostring(root, encoding="utf-8", xml_declaration=True)
