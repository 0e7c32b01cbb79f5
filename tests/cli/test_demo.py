"""``gradci up --demo``: the library in two runs, the neural-network family first, the second run
submitted only once the first has finished (its jobs would otherwise hold back the first run's
finalisation, queued behind them), each run's summary printed, and the exit code of the worst run. The runs go through the real API and worker of
conftest's ``redis_service`` (PostgreSQL, Redis, a ``gradci worker`` process)."""
from __future__ import annotations

import io

import pytest
from rich.console import Console

from gradci._testing.service import Service
from gradci.cli.client import EXIT_FAILED, EXIT_OK, GradciClient
from gradci.cli.demo import demo_exit_code, demo_matrices, run_demo
from gradci.cli.supervisor import Supervisor
from gradci.scenarios import library
from gradci.scenarios.contract.matrix import Matrix, select_scenarios
from gradci.services.db.models import Run
from gradci.services.db.session import session_scope


def test_the_demo_is_the_nn_family_then_every_other_scenario_of_the_library() -> None:
    parts = demo_matrices(Matrix(backends=("fd",), dtypes=("float64",)))
    default = library.default()
    chosen = [select_scenarios(default, part.scenarios) for part in parts]
    assert [part.backends for part in parts] == [("fd",), ("fd",)]  # the rest of the matrix is kept
    assert chosen[0] and {s.name.split("/")[0] for s in chosen[0]} == {"nn"}
    assert sorted(s.name for part in chosen for s in part) == sorted(s.name for s in default)  # each once


def test_scenarios_asked_for_make_one_run() -> None:
    asked = Matrix(scenarios=("linalg/*",))
    assert demo_matrices(asked) == [asked]


def test_the_demo_exits_as_its_worst_run() -> None:
    passed = {"status": "passed", "counts": {"pass": 3}}
    failed = {"status": "passed", "counts": {"pass": 2, "fail": 1}}
    assert demo_exit_code([passed, passed]) == EXIT_OK
    assert demo_exit_code([passed, failed]) == demo_exit_code([failed, passed]) == EXIT_FAILED


@pytest.mark.integration
def test_each_demo_run_is_submitted_once_the_one_before_has_finished(redis_service: Service) -> None:
    parts = [Matrix(backends=("fd",), dtypes=("float64",), scenarios=(pattern,))
             for pattern in ("elementary/multiply/*", "elementary/divide/*")]
    output = io.StringIO()
    with GradciClient(redis_service.url, redis_service.token) as client:
        runs = run_demo(client, Supervisor(), Console(file=output, width=200), parts)
    assert [run["status"] for run in runs] == ["passed", "passed"]
    printed = output.getvalue()
    assert all(f"demo: run {run['id']} finished" in printed and f"/runs/{run['id']}" in printed for run in runs)
    with session_scope(redis_service.database_url, readonly=True) as session:
        first, second = (session.get(Run, run["id"]) for run in runs)
        assert first.finished_at is not None and second.created_at >= first.finished_at
