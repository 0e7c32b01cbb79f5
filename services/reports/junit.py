"""A stored run as JUnit XML, streamed, never whole in memory.

The counters of each testsuite come from one GROUP BY, then the testcases are written as the
database hands them over through a server-side cursor, a batch at a time — the document of a million
cells is never in memory, on either side.

The testcases are ``gradci.scenarios.contract.formats``' own (the same markup ``gradci check --format junit`` writes);
only the document around them is written here, since its counters must precede the cases they count.
"""
from __future__ import annotations

import gzip
import io
import itertools
import xml.etree.ElementTree as ET
from collections import defaultdict
from collections.abc import Iterator
from typing import Any
from xml.sax.saxutils import quoteattr

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from gradci.scenarios.contract.formats import JUNIT_COUNTERS, JUNIT_OUTCOMES, junit_testcase, xml_text
from gradci.services.db.models import Result
from gradci.services.db.queries import without_jit

GZIP_LEVEL = 6  # a million cells: 107 MiB of XML to a few MiB, in seconds, once per run
BATCH_ROWS = 2000  # rows per fetch from the server-side cursor, and testcases per serialised chunk
SUITE_COLUMNS = (Result.backend, Result.device, Result.dtype)
_WRAPPER = "testsuite"
# gradci.scenarios.contract.formats.cell_ms in SQL: the steady state where timed, else the one call.
CELL_MS = func.coalesce(Result.time_ms, Result.first_call_ms)


class _Suite:
    """The counters of one testsuite (or of the whole document) and its time in seconds."""

    def __init__(self) -> None:
        self.counts = dict.fromkeys(JUNIT_COUNTERS, 0)
        self.time_s = 0.0

    def add(self, status: str, cells: int, time_ms: float | None) -> None:
        self.counts["tests"] += cells
        outcome = JUNIT_OUTCOMES.get(status)
        if outcome is not None:
            self.counts[outcome[1]] += cells
        self.time_s += (time_ms or 0.0) / 1000

    def attributes(self) -> str:
        return " ".join(f'{key}="{value}"' for key, value in (*self.counts.items(), ("time", f"{self.time_s:.6f}")))


def _suites(session: Session, run_id: int) -> tuple[dict[tuple[str, str, str], _Suite], _Suite]:
    statement = (select(*SUITE_COLUMNS, Result.status, func.count(), func.sum(CELL_MS))
                 .where(Result.run_id == run_id).group_by(*SUITE_COLUMNS, Result.status))
    suites: dict[tuple[str, str, str], _Suite] = defaultdict(_Suite)
    whole = _Suite()
    for backend, device, dtype, status, cells, time_ms in session.execute(statement):
        suites[backend, device, dtype].add(status, cells, time_ms)
        whole.add(status, cells, time_ms)
    return suites, whole


def _testcases(suite_name: str, rows: list[Any]) -> str:
    """The testcases of ``rows`` as ``gradci.scenarios.contract.formats`` writes them, serialised in one call."""
    parent = ET.Element(_WRAPPER)
    for row in rows:
        junit_testcase(parent, suite_name, row)
    text = ET.tostring(parent, encoding="unicode")
    return text[len(f"<{_WRAPPER}>"):-len(f"</{_WRAPPER}>")]  # the cases without their scratch parent


def junit_chunks(session: Session, run_id: int, name: str) -> Iterator[bytes]:
    """The run's JUnit document in pieces.

    One testsuite per backend × device × dtype, one testcase per cell, by scenario within a suite.
    """
    without_jit(session)
    suites, whole = _suites(session, run_id)
    yield (f"<?xml version='1.0' encoding='utf-8'?>\n<testsuites name={quoteattr(xml_text(name))} "
           f"{whole.attributes()}>").encode()
    # Core rows, not ORM ones: a million of them, and the ORM's loading was a tenth of the time.
    rows = session.connection().execute(
        select(*SUITE_COLUMNS, Result.scenario, Result.status, Result.message, CELL_MS.label("time_ms"))
        .where(Result.run_id == run_id)
        .order_by(*SUITE_COLUMNS, Result.scenario)
        .execution_options(yield_per=BATCH_ROWS))
    suite_key = None
    for batch in rows.partitions():
        for key, group in itertools.groupby(batch, key=lambda row: tuple(row[:3])):
            suite_name = ".".join(key)
            if key != suite_key:
                closing = "</testsuite>" if suite_key is not None else ""
                yield f"{closing}<testsuite name={quoteattr(xml_text(suite_name))} {suites[key].attributes()}>".encode()
                suite_key = key
            yield _testcases(suite_name, list(group)).encode()
    yield ("</testsuite></testsuites>" if suite_key is not None else "</testsuites>").encode()


def document_name(run_id: int) -> str:
    return f"gradci run {run_id}"


def compressed_junit(session: Session, run_id: int) -> bytes:
    """The run's whole document, gzipped as it is written: the plain text is never whole in memory.

    ``mtime=0``: the same cells give the same bytes.
    """
    out = io.BytesIO()
    with gzip.GzipFile(fileobj=out, mode="wb", compresslevel=GZIP_LEVEL, mtime=0) as compressed:
        for chunk in junit_chunks(session, run_id, document_name(run_id)):
            compressed.write(chunk)
    return out.getvalue()


def decompressed_chunks(blob: bytes, chunk_bytes: int = 1 << 20) -> Iterator[bytes]:
    """A stored document for a client that does not accept gzip, inflated a bounded piece at a time."""
    with gzip.GzipFile(fileobj=io.BytesIO(blob)) as document:
        while piece := document.read(chunk_bytes):
            yield piece
