"""Big runs: the report, the PR comment, junit.xml and the dashboard's run page of a run of 200,004
results cost the server a bounded amount of memory — measured as the peak resident set of a real
uvicorn process during each request — and still tell the truth about every cell.

Loading the cells would cost far more than the bound: the previous code, which built each answer
from every cell, peaked 600 MB to 1 GB above the baseline here.
"""
from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import delete, text

from gradci._testing.big_runs import MATRIX_SIZE, BigRun, create_big_run
from gradci._testing.served_app import ServedApp, served_app
from gradci.scenarios.contract.cell import STATUSES
from gradci.services.db.models import Result, Run
from gradci.services.db.queries import ATTENTION_ORDER
from gradci.services.db.results import upsert_results
from gradci.services.db.session import engine_for, session_scope
from gradci.services.reports import finished_counts
from gradci.services.reports.markdown import LIST_LIMIT as COMMENT_LIST_LIMIT
from gradci.services.reports.markdown import render
from gradci.services.reports.report_record import LIST_LIMIT
from gradci.services.reports.run_report import report_for_run, store_report
from gradci.services.settings import Settings
from gradci.web.app import create_app
from gradci.web.run_page import CELLS_PER_PAGE
from tests.support.report_cases import cell, report_of

CELLS = 7143 * MATRIX_SIZE  # 200,004
# What one request may add to the server's resident memory. Every cell as a Python object takes
# several hundred MB for this run; a bounded answer needs a few MB (psycopg's batches, the page).
MEMORY_BOUND_MIB = 64


@pytest.fixture(scope="module")
def big_run(postgres_database: str) -> BigRun:
    with session_scope(postgres_database) as session:
        big = create_big_run(session, CELLS)
    with engine_for(postgres_database).connect().execution_options(isolation_level="AUTOCOMMIT") as connection:
        connection.exec_driver_sql("VACUUM ANALYZE results, scenario_catalog")
    return big


@pytest.fixture(scope="module")
def app(postgres_database: str, big_run: BigRun, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServedApp]:
    with served_app(postgres_database, tmp_path_factory.mktemp("big-run-logs")) as served:
        # Warm up on a small run: imports, templates and the connection pool are not the request's cost.
        with httpx.Client(base_url=served.url, timeout=60) as client:
            for path in ("/api/runs", "/", f"/api/runs/{big_run.base_id}"):
                client.get(path).raise_for_status()
        yield served


def _scalar_rows(database_url: str, sql: str, **params) -> dict:
    with engine_for(database_url).connect() as connection:
        return dict(connection.execute(text(sql), params).all())


def _bounded(app: ServedApp, baseline: float, request):
    answer, peak = app.peak_rss_during(request)
    assert peak - baseline < MEMORY_BOUND_MIB, f"the request took the server from {baseline:.0f} to {peak:.0f} MiB"
    return answer


def _count_testcases(response: httpx.Response) -> tuple[int, dict[str, int]]:
    """Testcases in a streamed JUnit document and the root's counters, parsed as it arrives."""
    parser = ET.XMLPullParser(events=("start", "end"))
    cases, root = 0, None
    for chunk in response.iter_bytes():
        parser.feed(chunk)
        for event, element in parser.read_events():
            if event == "start" and root is None:
                root = element
            elif event == "end" and element.tag == "testcase":
                cases += 1
            elif event == "end" and element.tag == "testsuite":
                element.clear()  # the test process stays small too
    parser.close()
    return cases, {key: int(root.get(key)) for key in ("tests", "failures", "errors", "skipped")}


@pytest.mark.integration
def test_a_big_runs_answers_stay_small_and_true(postgres_database: str, big_run: BigRun, app: ServedApp) -> None:
    head = big_run.head_id
    by_status = _scalar_rows(postgres_database, "SELECT status, count(*) FROM results WHERE run_id = :r GROUP BY status",
                             r=head)
    regressions = _scalar_rows(postgres_database, """
        SELECT 'regressions', count(*) FROM results h JOIN results b ON b.run_id = :b AND b.scenario = h.scenario
          AND b.backend = h.backend AND b.device = h.device AND b.dtype = h.dtype
        WHERE h.run_id = :h AND b.status = 'pass' AND h.status NOT IN ('pass', 'skip')""",
                               h=head, b=big_run.base_id)["regressions"]
    assert regressions > COMMENT_LIST_LIMIT and regressions > LIST_LIMIT  # the lists must be cut
    baseline = app.rss_mib()

    with httpx.Client(base_url=app.url, timeout=300) as client:
        report = _bounded(app, baseline, lambda: client.get(f"/api/runs/{head}/report")).json()
        assert report["totals"]["head"] == {status: by_status.get(status, 0) for status in STATUSES}
        assert sum(sum(g["counts"].values()) for g in report["groups"]) == CELLS
        assert report["change_counts"]["regressions"] == regressions
        assert len(report["regressions"]) == LIST_LIMIT
        assert all(len(g["missing"]) <= LIST_LIMIT for g in report["groups"])
        changed = len(range(0, CELLS // MATRIX_SIZE, 50))  # every 50th scenario changed (big_run_data)
        assert report["change_counts"]["changed_scenarios"] == changed
        assert f"of {changed * MATRIX_SIZE} changed cells pass" in report["patch"]["description"]

        comment = _bounded(app, baseline, lambda: client.get(f"/api/runs/{head}/report?format=markdown")).text
        assert f"**Regressions** ({regressions})" in comment
        assert f"… and {regressions - COMMENT_LIST_LIMIT} more" in comment
        assert len(comment) <= 65536

        def junit() -> tuple[int, dict[str, int]]:
            with client.stream("GET", f"/api/runs/{head}/junit.xml") as response:
                response.raise_for_status()
                return _count_testcases(response)

        cases, counters = _bounded(app, baseline, junit)
        assert cases == CELLS  # one testcase per cell
        assert counters == {"tests": CELLS, "failures": by_status["fail"] + by_status["xpass"],
                            "errors": by_status["error"], "skipped": by_status["skip"] + by_status["xfail"]}

        page = _bounded(app, baseline, lambda: client.get(f"/runs/{head}"))
        assert page.status_code == 200
        statuses = [status for status, _ in _table_rows(page.text)]
        assert statuses and set(statuses) == {"fail"}  # failures first: the first page holds only them
        assert 'href="?cursor=' in page.text  # and the next page is one link away


def _table_rows(html: str) -> list[tuple[str, str]]:
    """(status, scenario) of each row of the run page's cell table."""
    return re.findall(r'<span class="status s-(\w+)">[^<]*</span></a></td>\s*<td><a href="/runs/\d+/cells/\d+">'
                      r'<code>([^<]+)</code>', html)


# --- the bounded lists and pages, on both databases ------------------------------------------------


def test_report_lists_the_worst_changes_first_and_counts_them_all(database_url: str) -> None:
    """120 regressions: the report lists LIST_LIMIT of them, errors (no numbers) first, then the cells
    furthest over their tolerance; the counts and the comment say how many there are in all."""
    base = [cell(f"s{i:03d}", "pass") for i in range(130)]
    head = [cell(f"s{i:03d}", "fail", err=1e-9 * (i + 1)) if i % 40 else
            {**cell(f"s{i:03d}", "error"), "max_abs_err": None, "max_rel_err": None} for i in range(120)]
    head += [cell(f"s{i:03d}", "pass") for i in range(120, 130)]
    report = report_of(database_url, head, {}, base, {}, pr_number=1)
    assert report.change_counts.regressions == 120 and len(report.regressions) == LIST_LIMIT
    listed = [c.scenario for c in report.regressions]
    assert listed[:3] == ["s000", "s040", "s080"]  # errored: no tolerance ratio, the worst news
    assert listed[3:] == [f"s{i:03d}" for i in range(119, 0, -1) if i % 40][:LIST_LIMIT - 3]
    group = report.groups[0]
    assert group.missing_count == 120 and len(group.missing) == LIST_LIMIT
    assert group.missing[:2] == ["s000 [float64]", "s001 [float64]"]  # in stored order
    comment = render(report)
    assert "**Regressions** (120)" in comment and f"… and {120 - COMMENT_LIST_LIMIT} more" in comment


def test_the_run_page_walks_every_cell_once_failures_first(database_url: str, make_run, cell_factory,
                                                          tmp_path: Path, clean_environment) -> None:
    assert sorted(ATTENTION_ORDER) == sorted(STATUSES)
    run_id = make_run(database_url)
    with session_scope(database_url) as session:
        upsert_results(session, run_id, [cell_factory(i) for i in range(250)])
    seen: list[tuple[str, str]] = []
    with TestClient(create_app(Settings(database_url=database_url, workdir=tmp_path / "work",
                                        read_access="open"))) as client:
        path = f"/runs/{run_id}"
        while path:
            page = client.get(path)
            assert page.status_code == 200
            rows = _table_rows(page.text)
            assert 0 < len(rows) <= CELLS_PER_PAGE
            seen += rows
            link = re.search(r'href="(\?cursor=[^"#]+)#cells"', page.text)
            path = f"/runs/{run_id}{link.group(1)}" if link else None
    assert sorted(seen) == sorted((c["status"], c["scenario"]) for c in map(cell_factory, range(250)))
    ranks = [ATTENTION_ORDER.index(status) for status, _ in seen]
    assert ranks == sorted(ranks)  # failures, errors and unexpected passes before everything else


def test_a_finished_runs_report_is_stored_and_its_counts_remembered(sqlite_url: str, make_run, cell_factory) -> None:
    run_id = make_run(sqlite_url)

    def report_and_counts() -> tuple[int, int]:
        with session_scope(sqlite_url, readonly=True) as session:
            run = session.get(Run, run_id)
            return report_for_run(session, run).totals.head.total, sum(finished_counts.cell_counts(session, [run])[run_id].values())

    def store(cells: range) -> None:
        with session_scope(sqlite_url) as session:
            upsert_results(session, run_id, [cell_factory(i) for i in cells])

    store(range(10))
    assert report_and_counts() == (10, 10)
    with session_scope(sqlite_url) as session:  # a report stored while running is never served
        store_report(session, session.get(Run, run_id))
    store(range(10, 20))  # a running run's cells keep landing: nothing about it is kept
    assert report_and_counts() == (20, 20)
    with session_scope(sqlite_url) as session:  # finalised: its report is stored
        session.get(Run, run_id).status = "passed"
    with session_scope(sqlite_url) as session:
        store_report(session, session.get(Run, run_id))
    assert report_and_counts() == (20, 20)
    with session_scope(sqlite_url) as session:  # what cannot happen to a finished run shows it is not asked again
        session.execute(delete(Result).where(Result.run_id == run_id))
    assert report_and_counts() == (20, 20)
