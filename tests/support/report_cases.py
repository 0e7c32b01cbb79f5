"""Reports of small hand-written runs: the cells and scenario fingerprints of a pull request's run and
of its base run, stored in a real database, reported through the same queries the service uses."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gradci.services.db.models import Run, RunStatus, ScenarioCatalogEntry
from gradci.services.db.results import upsert_results
from gradci.services.db.runs import create_run, get_or_create_repository
from gradci.services.db.session import session_scope
from gradci.services.reports.report_record import RunReport
from gradci.services.reports.run_report import report_for_run

HEAD_SHA, BASE_SHA = "1234567abc" + "0" * 30, "abcdef0123" + "0" * 30


def stored_cell(cell: Mapping[str, Any]) -> dict[str, Any]:
    """A report test's cell with the fields ingestion requires and the test does not care about."""
    backend = cell["backend"]
    framework = "numpy" if backend == "fd" else backend.split("-")[0]
    mode = "finite" if backend == "fd" else "forward" if backend.endswith("-fwd") else "reverse"
    return {"operator": "gradient", "framework": framework, "mode": mode, **cell}


def _store_run(session: Any, cells: Sequence[Mapping[str, Any]], fingerprints: Mapping[str, str],
               config: dict[str, Any] | None = None, **fields: Any) -> Run:
    run = create_run(session, **fields)
    run.status, run.config = RunStatus.passed.value, config or {}
    upsert_results(session, run.id, [stored_cell(cell) for cell in cells])
    session.add_all(ScenarioCatalogEntry(run_id=run.id, name=name, operator="gradient", fingerprint=fingerprint,
                                         tags=[]) for name, fingerprint in fingerprints.items())
    return run


def report_of(database_url: str, head: Sequence[Mapping[str, Any]], head_fingerprints: Mapping[str, str],
              base: Sequence[Mapping[str, Any]] | None = None, base_fingerprints: Mapping[str, str] | None = None,
              *, pr_number: int | None = None, config: dict[str, Any] | None = None) -> RunReport:
    """The report of a finished run of ``head`` cells against a finished base run of ``base`` cells
    (no base run when ``base`` is None)."""
    with session_scope(database_url) as session:
        repository = get_or_create_repository(session, "file:///o/r.git", "o/r")
        if base is not None:
            _store_run(session, base, base_fingerprints or {}, repository=repository, head_sha=BASE_SHA)
        run = _store_run(session, head, head_fingerprints, config, repository=repository, head_sha=HEAD_SHA,
                         base_sha=BASE_SHA if base is not None else None, pr_number=pr_number)
        session.flush()
        return report_for_run(session, run)


def cell(scenario, status, backend="torch-rev", err=1e-12, dtype="float64"):
    """A report case's cell: scenario, status and error; the rest as any passing cpu cell."""
    return dict(scenario=scenario, backend=backend, device="cpu", dtype=dtype, status=status, max_abs_err=err,
                max_rel_err=err, atol=1e-9, rtol=1e-6, message="")
