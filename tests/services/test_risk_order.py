"""Cells likeliest to fail run first: those that reached a rule the change touched, then those that
failed or nearly failed in the earlier run, then the rest; by job (the order they are sent in) and
within a job. The earlier run's readings on real PostgreSQL and SQLite."""
from __future__ import annotations

from sqlalchemy import select

from gradci.scenarios.contract.matrix import Matrix
from gradci.services import planner
from gradci.services.db.cell_risk import cells_reaching, failing_cells, rule_methods
from gradci.services.db.models import RuleReach
from gradci.services.db.results import upsert_results
from gradci.services.db.rules import reach_rows, record_reaches, record_rules
from gradci.services.db.session import session_scope
from gradci.services.job_balance import (
    CHANGED_RULE,
    FAILED_BEFORE,
    UNREMARKABLE,
    Costs,
    Risk,
    changed_rules,
    riskiest_first,
)
from gradci.services.planner import JobSpec, ScenarioInfo

NAMES = [f"s{i:02d}" for i in range(10)]


def plan(risk: Risk | None, costs: Costs | None = None, chunk_size: int = 3,
         backends: tuple[str, ...] = ("torch-rev",)) -> list[JobSpec]:
    return list(planner.divide_into_jobs([ScenarioInfo(name) for name in NAMES],
                                         run_matrix=Matrix(backends=backends, devices=("cpu",)),
                                         file_matrix=Matrix(), available_backends=list(backends),
                                         known_backends=list(backends), chunk_size=chunk_size, costs=costs,
                                         risk=risk).jobs)


def test_the_tiers_changed_rule_then_failed_before_then_the_rest():
    risk = Risk.of_earlier_run(reached_changed=[("a", "torch-rev", "cuda:1")],
                               failed=[("a", "torch-rev", "cuda:0"), ("b", "torch-rev", "cpu")])
    # a reached a changed rule: that outranks its failure; a GPU's cells speak for any GPU of the run
    assert risk.of(["a", "b", "c"], "torch-rev", "cuda:3") == [CHANGED_RULE, UNREMARKABLE, UNREMARKABLE]
    assert risk.of(["a", "b", "c"], "torch-rev", "cpu") == [UNREMARKABLE, FAILED_BEFORE, UNREMARKABLE]
    assert risk.of(["b"], "jax-rev", "cpu") == [UNREMARKABLE]  # per backend
    assert risk.riskiest_first(["c", "b", "d", "a"], "torch-rev", "cuda") == ["a", "c", "b", "d"]
    assert riskiest_first([2, 1, 1, 0], [5.0, 1.0, 3.0, 0.5]) == [3, 2, 1, 0]  # by tier, then longest
    assert riskiest_first([2, 2, 2], [1.0, 1.0, 1.0]) == [0, 1, 2]  # ties keep their order


def test_rules_are_changed_where_a_methods_source_or_set_differs():
    earlier = {"m.py::Same": [{"name": "backward", "digest": "1"}],
               "m.py::Edited": [{"name": "backward", "digest": "1"}],
               "m.py::Grown": [{"name": "backward", "digest": "1"}]}
    now = [{"id": "m.py::Same", "methods": [{"name": "backward", "digest": "1", "source": "elsewhere"}]},
           {"id": "m.py::Edited", "methods": [{"name": "backward", "digest": "2"}]},
           {"id": "m.py::Grown", "methods": [{"name": "backward", "digest": "1"}, {"name": "jvp", "digest": "3"}]},
           {"id": "m.py::New", "methods": [{"name": "backward", "digest": "4"}]}]  # no cell of the earlier run reached it
    assert changed_rules(now, earlier) == {"m.py::Edited", "m.py::Grown"}


def test_jobs_holding_risky_scenarios_go_first_with_the_risky_scenarios_first_inside():
    unordered = plan(None)
    assert [job.scenarios for job in unordered][:2] == [("s00", "s01", "s02"), ("s03", "s04", "s05")]
    risk = Risk.of_earlier_run(reached_changed=[("s08", "torch-rev", "cpu")],
                               failed=[("s05", "torch-rev", "cpu"), ("s09", "torch-rev", "cpu")])
    ordered = plan(risk)
    assert [job.scenarios for job in ordered] == [("s08", "s05", "s09"), ("s00", "s01", "s02"),
                                                  ("s03", "s04", "s06"), ("s07",)]
    assert sorted(name for job in ordered for name in job.scenarios) == NAMES  # each cell once
    # One scenario per job: the job of the changed rule's scenario is sent first, then the failures'.
    singles = plan(risk, chunk_size=1)
    assert [job.scenarios[0] for job in singles][:3] == ["s08", "s05", "s09"]
    # Per backend: s05 failed on torch-rev only, so jax-rev's jobs keep their plain order.
    both = plan(Risk.of_earlier_run([], [("s05", "torch-rev", "cpu")]), chunk_size=1, backends=("jax-rev", "torch-rev"))
    assert (both[0].backend, both[0].scenarios) == ("torch-rev", ("s05",))
    assert [job.scenarios[0] for job in both if job.backend == "jax-rev"] == NAMES


def test_risk_comes_before_cost_and_cost_orders_within_a_tier():
    seconds = {(name, "torch-rev", "cpu"): 1.0 for name in NAMES} | {("s01", "torch-rev", "cpu"): 9.0}
    risk = Risk.of_earlier_run([], [("s07", "torch-rev", "cpu")])
    jobs = plan(risk, Costs(seconds, workers=1), chunk_size=25)
    assert jobs[0].scenarios[0] == "s07"  # the cheap risky job before the costly one
    rest = [job.cost_s for job in jobs[1:]]
    assert rest == sorted(rest, reverse=True)
    assert plan(None, Costs(seconds, workers=1), chunk_size=25)[0].scenarios[0] != "s07"


def test_the_earlier_runs_failures_near_failures_and_rule_reaches(database_url, make_run, cell_factory):
    run = make_run(database_url)

    def cell(index: int, status: str, abs_err: float | None, rel_err: float | None, **axes: str) -> dict:
        return cell_factory(index, status=status, **axes) | {"max_abs_err": abs_err, "max_rel_err": rel_err,
                                                             "atol": 1e-8, "rtol": 1e-6,
                                                             "message": "" if status == "pass" else "why"}

    cells = [cell(1, "fail", 1.0, 1.0), cell(2, "error", None, None, backend="torch-rev"),
             cell(3, "pass", 6e-9, 7e-7),  # used 60 % of atol and 70 % of rtol: nearly failed
             cell(4, "pass", 6e-9, 1e-7),  # 10 % of rtol: either bound holding, it is far from failing
             cell(5, "pass", None, 9e-7),  # only the relative share known: 90 %
             cell(6, "pass", 1e-9, 1e-8), cell(7, "skip", None, None), cell(8, "xfail", 1.0, 1.0),
             cell(9, "pass", 6e-9, 7e-7, dtype="float32") | {"status": "pass"}]
    with session_scope(database_url) as session:
        upsert_results(session, run, cells)
        record_rules(session, run, [{"id": "m.py::R", "kind": "torch.autograd.Function", "name": "R", "file": "m.py",
                                     "methods": [{"name": "backward", "digest": "1"}]}])
        record_reaches(session, reach_rows(run, cells[5], {"rules": {"m.py::R": ["backward"]}})
                       + reach_rows(run, cells[6], {"rules": {"m.py::Other": ["backward"]}}))
    with session_scope(database_url, readonly=True) as session:
        assert failing_cells(session, run) == {("scenario_00001", "jax-rev", "cpu"),
                                               ("scenario_00002", "torch-rev", "cpu"),
                                               ("scenario_00003", "jax-rev", "cpu"),
                                               ("scenario_00005", "jax-rev", "cpu"),
                                               ("scenario_00009", "jax-rev", "cpu")}
        assert rule_methods(session, run) == {"m.py::R": [{"name": "backward", "digest": "1"}]}
        assert cells_reaching(session, run, ["m.py::R"]) == {("scenario_00006", "jax-rev", "cpu")}
        assert cells_reaching(session, run, []) == set()
        assert len(list(session.scalars(select(RuleReach.id).where(RuleReach.run_id == run)))) == 2
