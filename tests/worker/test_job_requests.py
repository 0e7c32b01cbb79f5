"""How a job asks its runner for cells: a scenario's dtypes in one request, as ``gradci check`` asks,
in the job's order, with the index where each scenario's cells begin (a job stopped by its soft time
limit stores the cells from there on as errors)."""
from __future__ import annotations

from gradci.worker.job_execution import scenario_groups


def test_a_scenarios_cells_go_in_one_request_in_the_jobs_order() -> None:
    cells = [("a", "float64"), ("a", "float32"), ("b", "float64"), ("c", "float64"), ("c", "float32")]
    assert scenario_groups(cells) == [(0, [("a", "float64"), ("a", "float32")]), (2, [("b", "float64")]),
                                      (3, [("c", "float64"), ("c", "float32")])]


def test_a_scenario_met_again_later_is_a_request_of_its_own() -> None:
    # The job's order is kept: cells are never moved to join an earlier request.
    assert scenario_groups([("a", "float64"), ("b", "float64"), ("a", "float32")]) == [
        (0, [("a", "float64")]), (1, [("b", "float64")]), (2, [("a", "float32")])]
    assert scenario_groups([]) == []
