"""Machine-readable reports of a check: JSON (a list of Cell dicts) and JUnit XML."""
from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from collections import defaultdict
from typing import Iterable

from scenarios.cell import Cell


def cells_to_json(cells: Iterable[Cell]) -> str:
    return json.dumps([cell.to_dict() for cell in cells], indent=2)


def cells_to_junit(cells: Iterable[Cell], name: str = "gradci") -> str:
    """One testsuite per backend × device × dtype; fail and xpass are failures, error errors,
    skip and xfail skipped."""
    suites: dict[tuple[str, str, str], list[Cell]] = defaultdict(list)
    for cell in cells:
        suites[(cell.backend, cell.device, cell.dtype)].append(cell)
    root = ET.Element("testsuites", name=name)
    for (backend, device, dtype), members in suites.items():
        suite = ET.SubElement(root, "testsuite", name=f"{backend}/{device}/{dtype}", tests=str(len(members)),
                              failures=str(sum(c.status in ("fail", "xpass") for c in members)),
                              errors=str(sum(c.status == "error" for c in members)),
                              skipped=str(sum(c.status in ("skip", "xfail") for c in members)))
        for cell in members:
            case = ET.SubElement(suite, "testcase", classname=f"{backend}.{device}.{dtype}", name=cell.scenario,
                                 time=f"{(cell.time_ms or 0) / 1e3:.6f}")
            detail = (f"{cell.message} (max_abs_err={cell.max_abs_err}, max_rel_err={cell.max_rel_err}, "
                      f"atol={cell.atol}, rtol={cell.rtol})")
            if cell.status in ("fail", "xpass"):
                ET.SubElement(case, "failure", message=cell.message or cell.status).text = detail
            elif cell.status == "error":
                ET.SubElement(case, "error", message=cell.message).text = cell.message
            elif cell.status in ("skip", "xfail"):
                ET.SubElement(case, "skipped", message=cell.message)
    return ET.tostring(root, encoding="unicode", xml_declaration=True)
