"""Storage against real PostgreSQL and SQLite: migrations, upserts, pagination, run lifecycle."""
from __future__ import annotations

import math
import subprocess
import sys
import textwrap
import time
from datetime import timedelta
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import func, select, text
from sqlalchemy.exc import IntegrityError

from gradci.scenarios.contract.cell import STATUSES, InvalidCell
from gradci.scenarios.contract.coverage import coverage_percent, status_counts
from gradci.services.database_urls import normalize_database_url
from gradci.services.db import queries
from gradci.services.db.migrate import current_revision, upgrade
from gradci.services.db.models import Base, CellStatus, Job, Result, Run, Worker, utcnow
from gradci.services.db.pagination import InvalidCursor, decode_cursor, encode_cursor
from gradci.services.db.results import result_row, upsert_results
from gradci.services.db.runs import (
    RunAlreadyFinished,
    create_rerun,
    get_or_create_repository,
    request_cancel,
)
from gradci.services.db.session import engine_for, session_scope
from gradci.services.db.workers import online_counts_by_device, record_heartbeat
from gradci.services.settings import Settings

REPO_ROOT = Path(__file__).resolve().parents[2]


def result_count(url: str, run_id: int) -> int:
    with session_scope(url) as session:
        return session.scalar(select(func.count()).select_from(Result).where(Result.run_id == run_id))


# --- schema -------------------------------------------------------------------------------------


def test_migrations_build_exactly_the_models(database_url: str) -> None:
    with engine_for(database_url).connect() as connection:
        context = MigrationContext.configure(connection, opts={"compare_type": True})
        assert compare_metadata(context, Base.metadata) == []


def test_upgrade_is_idempotent_and_reports_head(database_url: str) -> None:
    upgrade(database_url)  # already at head: nothing to do, no error
    assert current_revision(database_url) == "0021"


def test_sqlite_connections_use_wal_busy_timeout_and_foreign_keys(sqlite_url: str) -> None:
    with engine_for(sqlite_url).connect() as connection:
        assert connection.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert connection.exec_driver_sql("PRAGMA busy_timeout").scalar() >= 10_000
        assert connection.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1


def test_postgres_urls_use_psycopg3() -> None:
    assert normalize_database_url("postgresql://u@h/db").drivername == "postgresql+psycopg"
    assert normalize_database_url("postgres://u@h/db").drivername == "postgresql+psycopg"
    assert normalize_database_url("sqlite:///x.db").drivername == "sqlite"


def test_cell_statuses_agree_with_the_engine() -> None:
    assert CellStatus.values() == STATUSES


# --- results ------------------------------------------------------------------------------------


def test_upsert_twice_with_the_same_keys_keeps_one_row_each(database_url, make_run, cell_factory) -> None:
    run_id = make_run(database_url)
    cells = [cell_factory(i, status="fail") for i in range(50)]
    with session_scope(database_url) as session:
        assert upsert_results(session, run_id, cells) == 50
    # A redelivered job writes the same cells again, now passing.
    with session_scope(database_url) as session:
        upsert_results(session, run_id, [dict(cell, status="pass", message="") for cell in cells])
    assert result_count(database_url, run_id) == 50
    with session_scope(database_url) as session:
        assert queries.cell_counts(session, [run_id])[run_id]["pass"] == 50


def test_duplicate_keys_within_one_batch_keep_the_last(database_url, make_run, cell_factory) -> None:
    run_id = make_run(database_url)
    cells = [cell_factory(1, status="fail"), cell_factory(2), cell_factory(1, status="pass")]
    with session_scope(database_url) as session:
        upsert_results(session, run_id, cells)
    with session_scope(database_url) as session:
        row = session.scalars(select(Result).where(Result.scenario == "scenario_00001")).one()
        assert row.status == "pass"
    assert result_count(database_url, run_id) == 2


def test_same_scenario_on_other_backend_device_dtype_are_distinct_cells(database_url, make_run, cell_factory) -> None:
    run_id = make_run(database_url)
    cells = [
        cell_factory(0, backend=backend, device=device, dtype=dtype)
        for backend in ("jax-rev", "torch-rev") for device in ("cpu", "cuda:0") for dtype in ("float32", "float64")
    ]
    with session_scope(database_url) as session:
        upsert_results(session, run_id, cells)
    assert result_count(database_url, run_id) == 8


def test_a_batch_of_5000_synthetic_results_ingests(database_url, make_run, cell_factory) -> None:
    run_id = make_run(database_url)
    cells = [cell_factory(i) for i in range(5000)]
    started = time.perf_counter()
    with session_scope(database_url) as session:
        upsert_results(session, run_id, cells)
    elapsed = time.perf_counter() - started
    print(f"\ningested 5000 results in {elapsed:.2f}s ({5000 / elapsed:,.0f} cells/s) on {database_url.split(':')[0]}")
    assert result_count(database_url, run_id) == 5000
    with session_scope(database_url) as session:
        counts = queries.cell_counts(session, [run_id])[run_id]
    assert sum(counts.values()) == 5000 and counts["pass"] == 5000 * 3 // 8


def test_non_finite_errors_are_stored_as_null_and_bad_cells_refused(database_url, make_run, cell_factory) -> None:
    run_id = make_run(database_url)
    cell = dict(cell_factory(0), max_abs_err=math.nan, max_rel_err=math.inf, message=None)
    with session_scope(database_url) as session:
        upsert_results(session, run_id, [cell])
    with session_scope(database_url) as session:
        row = session.scalars(select(Result)).one()
        assert (row.max_abs_err, row.max_rel_err, row.message) == (None, None, "")
    with pytest.raises(InvalidCell, match="status 'great' is not one of pass, fail"), session_scope(database_url) as session:
        upsert_results(session, run_id, [dict(cell, status="great")])
    with pytest.raises(InvalidCell, match="missing backend"), session_scope(database_url) as session:
        upsert_results(session, run_id, [dict(cell, backend="")])


@pytest.mark.parametrize(("field", "value"), [("operator", "grad"), ("mode", "rev"), ("framework", "tensorflow"),
                                              ("dtype", "float8"), ("status", "ok")])
def test_cells_the_engine_never_produces_are_refused_by_ingestion_and_the_database(
        database_url, make_run, cell_factory, field, value) -> None:
    run_id = make_run(database_url)
    with pytest.raises(InvalidCell, match=f"{field} '{value}' is not one of"), session_scope(database_url) as session:
        upsert_results(session, run_id, [dict(cell_factory(0), **{field: value})])
    # The migrated schema's check constraints, from the same vocabularies, refuse a raw insert too.
    row = result_row(cell_factory(0), run_id=run_id)
    with pytest.raises(IntegrityError), session_scope(database_url) as session:
        session.execute(Result.__table__.insert(), [dict(row, **{field: value})])


def test_an_errored_cell_may_leave_operator_framework_and_mode_empty(database_url, make_run, cell_factory) -> None:
    run_id = make_run(database_url)
    vanished = dict(cell_factory(0), status="error", operator="", framework="", mode="",
                    message="the checkout no longer declares this scenario")
    with session_scope(database_url) as session:
        assert upsert_results(session, run_id, [vanished]) == 1
    with pytest.raises(InvalidCell, match="operator '' is not one of"), session_scope(database_url) as session:
        upsert_results(session, run_id, [dict(vanished, status="pass")])


def test_objects_with_to_dict_are_accepted_like_engine_cells(sqlite_url, make_run, cell_factory) -> None:
    class FakeCell:  # the shape of scenarios.cell.Cell, without importing the engine
        def __init__(self, fields):
            self.fields = fields

        def to_dict(self):
            return self.fields

    run_id = make_run(sqlite_url)
    with session_scope(sqlite_url) as session:
        upsert_results(session, run_id, [FakeCell(cell_factory(i)) for i in range(3)])
    assert result_count(sqlite_url, run_id) == 3


def test_results_pagination_returns_every_row_once(database_url, make_run, cell_factory) -> None:
    run_id = make_run(database_url)
    other_run = make_run(database_url)
    with session_scope(database_url) as session:
        upsert_results(session, run_id, [cell_factory(i) for i in range(253)])
        upsert_results(session, other_run, [cell_factory(i) for i in range(10)])
    for where, expected in [(queries.ResultFilter(), 253), (queries.ResultFilter(status="fail"), 32)]:
        seen, cursor, pages = [], None, 0
        while True:
            with session_scope(database_url) as session:
                page = queries.list_results(session, run_id, where, limit=20, cursor=cursor)
            seen += [row.scenario for row in page.items]
            pages += 1
            cursor = page.next_cursor
            if cursor is None:
                break
        assert len(seen) == len(set(seen)) == expected
        assert pages == math.ceil(expected / 20)


def test_results_filters_and_scenario_globs(database_url, make_run, cell_factory) -> None:
    run_id = make_run(database_url)
    cells = [cell_factory(i, backend=b, dtype=d) for i in range(20) for b in ("jax-rev", "torch-rev")
             for d in ("float32", "float64")]
    cells.append(dict(cell_factory(99), scenario="odd_%_name"))
    with session_scope(database_url) as session:
        upsert_results(session, run_id, cells)

    def count(**where):
        with session_scope(database_url) as session:
            return len(queries.list_results(session, run_id, queries.ResultFilter(**where), limit=1000).items)

    assert count(backend="torch-rev", dtype="float32") == 20
    assert count(scenario="scenario_0001?") == 40
    assert count(scenario="scenario_00003") == 4
    assert count(scenario="*%*") == 1  # LIKE wildcards in names are literal
    assert count(scenario="odd_%_name") == 1
    assert count(status="xpass", backend="jax-rev") == 4


def test_cursors_round_trip_and_foreign_ones_are_refused() -> None:
    assert decode_cursor(encode_cursor(12345)) == 12345
    for bad in ("zzz", "", "aWQ6", encode_cursor(1) + "x!", "bm9wZQ", "aWQ6LTE"):
        with pytest.raises(InvalidCursor):
            decode_cursor(bad)


# --- runs ---------------------------------------------------------------------------------------


def test_runs_list_newest_first_with_filters_and_pages(database_url, make_run) -> None:
    with session_scope(database_url) as session:
        repo = get_or_create_repository(session, "https://github.com/acme/kernels.git", "acme/kernels")
        assert get_or_create_repository(session, repo.url).id == repo.id
        repo_id = repo.id
    sha = "ab" * 20
    for index in range(12):
        fields = {"pr_number": 7} if index % 3 == 0 else {}
        with session_scope(database_url) as session:
            repository = session.get(type(repo), repo_id) if index % 2 == 0 else None
            from gradci.services.db.runs import create_run

            create_run(session, repository=repository, head_sha=sha if repository else None, **fields)

    def ids(**filters):
        with session_scope(database_url) as session:
            return [run.id for run in queries.list_runs(session, queries.RunFilter(**filters), limit=100).items]

    assert ids() == list(range(12, 0, -1))
    assert ids(repo="acme/kernels") == ids(repo="https://github.com/acme/kernels.git") == [11, 9, 7, 5, 3, 1]
    assert ids(sha=sha) == ids(sha="abab") == [11, 9, 7, 5, 3, 1]
    assert ids(pr=7) == [10, 7, 4, 1]
    assert ids(status="queued") == list(range(12, 0, -1)) and ids(status="passed") == []

    seen, cursor = [], None
    while True:
        with session_scope(database_url) as session:
            page = queries.list_runs(session, limit=5, cursor=cursor)
        seen += [run.id for run in page.items]
        if (cursor := page.next_cursor) is None:
            break
    assert seen == list(range(12, 0, -1))


def add_job(url: str, run_id: int, status: str) -> None:
    with session_scope(url) as session:
        session.add(Job(run_id=run_id, backend="jax-rev", device="cpu", queue="cpu", scenarios=["a"], status=status))


def test_cancel_drops_queued_jobs_and_finishes_when_nothing_runs(database_url, make_run) -> None:
    idle = make_run(database_url)
    add_job(database_url, idle, "queued")
    busy = make_run(database_url)
    add_job(database_url, busy, "queued")
    add_job(database_url, busy, "running")
    finished = make_run(database_url)
    with session_scope(database_url) as session:
        request_cancel(session, session.get(Run, idle))
        request_cancel(session, session.get(Run, busy))
    with session_scope(database_url) as session:
        assert session.get(Run, idle).status == "cancelled" and session.get(Run, idle).finished_at is not None
        busy_run = session.get(Run, busy)
        # The running job stops at its next cell; the run is finished by whoever sees it stop.
        assert (busy_run.status, busy_run.cancel_requested) == ("queued", True)
        assert queries.job_counts(session, [busy])[busy] == {
            "queued": 0, "running": 1, "done": 0, "error": 0, "cancelled": 1,
        }
        request_cancel(session, session.get(Run, idle))  # cancelling twice is harmless
        passed = session.get(Run, finished)
        passed.status = "passed"
        session.flush()
        with pytest.raises(RunAlreadyFinished, match="already finished"):
            request_cancel(session, passed)


def test_rerun_covers_the_unsuccessful_cells_of_the_same_commit(database_url, make_run, cell_factory) -> None:
    with session_scope(database_url) as session:
        repository = get_or_create_repository(session, "/srv/repos/kernels")
        from gradci.services.db.runs import create_run

        parent = create_run(session, repository=repository, head_sha="c" * 40, ref="main", pr_number=3)
        parent_id = parent.id
        upsert_results(session, parent_id, [
            cell_factory(1, status="pass"),
            cell_factory(2, status="fail", backend="torch-rev", dtype="float32"),
            cell_factory(3, status="error", device="cuda:0"),
            cell_factory(4, status="skip"),
        ])
        clean = create_run(session)
        upsert_results(session, clean.id, [cell_factory(1, status="pass")])
        assert create_rerun(session, clean) is None
    with session_scope(database_url) as session:
        child = create_rerun(session, session.get(Run, parent_id))
        assert (child.parent_run_id, child.trigger, child.head_sha, child.ref, child.pr_number) == (
            parent_id, "rerun", "c" * 40, "main", 3,
        )
        assert child.repository.url == "/srv/repos/kernels"
        # Exact names: "scenario_00002" as a plain word would also select "scenario_000020".
        assert child.matrix == {
            "scenarios": ["scenario_0000[2]", "scenario_0000[3]"],
            "backends": ["jax-rev", "torch-rev"],
            "devices": ["cpu", "cuda:0"],
            "dtypes": ["float32", "float64"],
        }


def test_deleting_a_run_deletes_its_jobs_and_results(database_url, make_run, cell_factory) -> None:
    run_id = make_run(database_url)
    add_job(database_url, run_id, "done")
    with session_scope(database_url) as session:
        upsert_results(session, run_id, [cell_factory(0)])
    with session_scope(database_url) as session:
        session.delete(session.get(Run, run_id))
    with session_scope(database_url) as session:
        assert session.scalar(select(func.count()).select_from(Job)) == 0
    assert result_count(database_url, run_id) == 0


# --- workers ------------------------------------------------------------------------------------


def test_heartbeats_upsert_and_count_online_per_device(database_url) -> None:
    with session_scope(database_url) as session:
        record_heartbeat(session, name="w1", host="h", device="cpu", queue="cpu", versions={"torch": "2.5"})
        record_heartbeat(session, name="w2", host="h", device="cuda:0", queue="cuda", versions={})
        record_heartbeat(session, name="w3", host="h", device="cpu", queue="cpu")
    with session_scope(database_url) as session:
        first_start = session.get(Worker, "w1").started_at
        record_heartbeat(session, name="w1", host="h", device="cpu", queue="cpu", versions={"torch": "2.6"})
        session.get(Worker, "w3").last_heartbeat = utcnow() - timedelta(minutes=5)  # went silent
    with session_scope(database_url) as session:
        w1 = session.get(Worker, "w1")
        assert w1.versions == {"torch": "2.6"} and w1.started_at == first_start
        assert w1.last_heartbeat.tzinfo is not None
        assert online_counts_by_device(session, within_s=60) == {"cpu": 1, "cuda:0": 1}
        assert session.scalar(select(func.count()).select_from(Worker)) == 3


# --- several processes on the embedded database ---------------------------------------------------

WRITER = textwrap.dedent(
    """
    import sys
    from gradci.services.db.results import result_row, upsert_results
    from gradci.services.db.session import session_scope
    url, run_id, worker = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    for batch in range(20):  # many small transactions, as workers stream results
        cells = [
            {"scenario": f"w{worker}_s{batch}_{i}", "operator": "gradient", "framework": "jax", "backend": "jax-rev",
             "mode": "reverse", "device": "cpu", "dtype": "float32", "status": "pass"}
            for i in range(50)
        ]
        with session_scope(url) as session:
            upsert_results(session, run_id, cells)
            session.execute(__import__("sqlalchemy").text("SELECT count(*) FROM results")).scalar()
    """
)


def test_several_processes_write_one_sqlite_file_without_locking_errors(sqlite_url, make_run) -> None:
    run_id = make_run(sqlite_url)
    writers = [
        subprocess.Popen([sys.executable, "-c", WRITER, sqlite_url, str(run_id), str(n)], cwd=REPO_ROOT,
                         stderr=subprocess.PIPE, text=True)
        for n in range(4)
    ]
    for writer in writers:
        _, stderr = writer.communicate(timeout=120)
        assert writer.returncode == 0, stderr
    assert result_count(sqlite_url, run_id) == 4 * 20 * 50


# --- settings and reports -------------------------------------------------------------------------


def test_settings_default_to_embedded_files_under_the_working_directory(clean_environment, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    settings = Settings()
    assert settings.database_url == f"sqlite:///{tmp_path / '.gradci' / 'gradci.db'}"
    assert settings.broker_url == f"sqla+sqlite:///{tmp_path / '.gradci' / 'broker.db'}"
    assert settings.broker_transport_options() == {"connect_args": {"timeout": 30}}
    assert (settings.max_job_attempts, settings.github_api_url) == (3, "https://api.github.com")
    settings.ensure_local_directories()
    assert (tmp_path / ".gradci").is_dir()


def test_settings_read_the_environment(clean_environment, monkeypatch) -> None:
    monkeypatch.setenv("GRADCI_DATABASE_URL", "postgresql://u@db/gradci")
    monkeypatch.setenv("GRADCI_BROKER_URL", "redis://redis:6379/0")
    monkeypatch.setenv("GRADCI_API_TOKEN", "t0ken")
    monkeypatch.setenv("GRADCI_ALLOWED_REPOS", "acme/*, https://git.example/x.git")
    monkeypatch.setenv("GRADCI_JOB_HARD_TIME_LIMIT_S", "7200")
    settings = Settings()
    assert settings.database_url == "postgresql+psycopg://u@db/gradci"  # resolved once: psycopg 3
    assert settings.api_token.get_secret_value() == "t0ken" and "t0ken" not in repr(settings)
    assert settings.allowed_repos == ["acme/*", "https://git.example/x.git"]
    # Redis must not redeliver a job that is still within its time limit.
    assert settings.broker_transport_options()["visibility_timeout"] > 7200
    monkeypatch.setenv("GRADCI_JOB_SOFT_TIME_LIMIT_S", "9000")
    with pytest.raises(ValueError, match="soft_time_limit"):
        Settings()


def test_coverage_counts_pass_fail_error_only() -> None:
    counts = status_counts(["pass"] * 6 + ["fail", "error"] + ["skip", "xfail", "xpass"] * 5)
    assert counts == {"pass": 6, "fail": 1, "error": 1, "skip": 5, "xfail": 5, "xpass": 5}
    assert coverage_percent(counts) == 75.0
    assert coverage_percent(status_counts(["skip", "xfail"])) is None
    with pytest.raises(ValueError):
        status_counts(["maybe"])


def test_session_scope_rolls_back_on_error(database_url, make_run) -> None:
    with pytest.raises(RuntimeError), session_scope(database_url) as session:
        session.add(Run(matrix={}))
        session.flush()
        raise RuntimeError("boom")
    with session_scope(database_url) as session:
        assert session.execute(text("SELECT count(*) FROM runs")).scalar() == 0
