"""A run's results as JUnit XML, the format CI systems (GitLab, Jenkins, GitHub actions) display.

One testsuite per backend × device × dtype, one testcase per scenario. fail and xpass are
failures (xpass: a declared expected failure no longer fails), error is an error, skip and xfail
are skipped — the same split ``gradci check`` uses for its exit code.
"""
from __future__ import annotations

import itertools
import re
import xml.etree.ElementTree as ET
from collections.abc import Iterable
from typing import Any

# XML 1.0 cannot carry most control characters, and tracebacks in messages sometimes do.
_NOT_XML = re.compile("[^\u0009\u000a\u000d\u0020-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
# (child element, JUnit counter it increments, message prefix) per cell status; pass has none.
_OUTCOME = {
    "fail": ("failure", "failures", ""),
    "xpass": ("failure", "failures", "unexpectedly passed (declared as an expected failure)"),
    "error": ("error", "errors", ""),
    "skip": ("skipped", "skipped", ""),
    "xfail": ("skipped", "skipped", "expected failure"),
}
_COUNTERS = ("tests", "failures", "errors", "skipped")


def _text(value: str) -> str:
    return _NOT_XML.sub("\ufffd", value)


def _seconds(time_ms: float | None) -> str:
    return f"{(time_ms or 0.0) / 1000:.6f}"


def _testcase(suite: ET.Element, suite_name: str, result: Any) -> str | None:
    """Append the result's testcase; returns the counter its outcome increments, if any."""
    case = ET.SubElement(
        suite, "testcase", name=_text(result.scenario), classname=_text(suite_name), time=_seconds(result.time_ms)
    )
    outcome = _OUTCOME.get(result.status)
    if outcome is None:
        return None
    element, counter, prefix = outcome
    message = _text(": ".join(part for part in (prefix, result.message or "") if part) or result.status)
    child = ET.SubElement(case, element, message=message.splitlines()[0][:500] if message else "", type=result.status)
    if element != "skipped":
        child.text = message
    return counter


def junit_xml(run_id: int, results: Iterable[Any]) -> bytes:
    """``results`` must arrive grouped by (backend, device, dtype), e.g. from
    ``queries.iter_results_by_matrix_cell``."""
    root = ET.Element("testsuites", name=f"gradci run {run_id}")
    totals = dict.fromkeys(_COUNTERS, 0)
    total_time = 0.0
    for (backend, device, dtype), group in itertools.groupby(results, key=lambda r: (r.backend, r.device, r.dtype)):
        name = f"{backend}.{device}.{dtype}"
        suite = ET.SubElement(root, "testsuite", name=_text(name))
        counts = dict.fromkeys(_COUNTERS, 0)
        suite_time = 0.0
        for result in group:
            counts["tests"] += 1
            counter = _testcase(suite, name, result)
            if counter:
                counts[counter] += 1
            suite_time += (result.time_ms or 0.0) / 1000
        suite.set("time", f"{suite_time:.6f}")
        for key, value in counts.items():
            suite.set(key, str(value))
            totals[key] += value
        total_time += suite_time
    for key, value in totals.items():
        root.set(key, str(value))
    root.set("time", f"{total_time:.6f}")
    return ET.tostring(root, encoding="utf-8", xml_declaration=True)
