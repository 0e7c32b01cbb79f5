"""The planner: matrix resolution, scenario selection and chunking, without a database."""
from __future__ import annotations

import pytest

from gradci.scenarios.contract.matrix import Matrix, exact_pattern, select_scenarios
from gradci.services.broker.queues import queue_for_device
from gradci.services.planner import (
    BackendScope,
    PlanError,
    ScenarioInfo,
    chunked,
    divide_into_jobs,
    job_cells,
    resolve_matrix,
)

KNOWN = ("jax-rev", "torch-rev", "fd")
SCENARIOS = tuple(
    ScenarioInfo(name=f"family/s{i}", operator="gradient", dtypes=("float64",) if i == 4 else ("float64", "float32"))
    for i in range(5)
)


def plan(run_matrix=None, file_matrix=None, chunk_size=2, **kwargs):
    return divide_into_jobs(SCENARIOS, run_matrix=Matrix.from_mapping(run_matrix), file_matrix=Matrix.from_mapping(file_matrix),
                    available_backends=("jax-rev", "fd"), known_backends=KNOWN, chunk_size=chunk_size, **kwargs)


def test_run_matrix_overrides_the_file_and_the_file_overrides_the_defaults() -> None:
    file_matrix = Matrix.of(backends=["torch-rev"], dtypes=["float32"], devices=["cpu", "cuda"])
    matrix = resolve_matrix(Matrix.of(backends=["fd"]), file_matrix, available_backends=["jax-rev"],
                            known_backends=KNOWN)
    assert matrix.backends == ("fd",)
    assert matrix.devices == ("cpu", "cuda")
    assert matrix.dtypes == ("float32",)
    defaults = resolve_matrix(Matrix(), Matrix(), available_backends=["jax-rev", "fd"], known_backends=KNOWN)
    assert defaults.backends == ("jax-rev", "fd") and defaults.devices == ("cpu",) and defaults.dtypes is None


def test_none_on_an_axis_means_not_given() -> None:
    stored = Matrix.from_mapping({"backends": None, "devices": None, "dtypes": None, "scenarios": None})
    assert Matrix.of(dtypes=["float64"]).overridden(stored).dtypes == ("float64",)
    assert Matrix().overridden(stored).dtypes is None
    assert Matrix.from_mapping(stored.to_mapping()) == stored


def test_unknown_backend_or_device_is_a_plan_error() -> None:
    with pytest.raises(PlanError, match="unknown backend 'nope'"):
        plan({"backends": ["nope"]})
    with pytest.raises(PlanError, match="unknown device 'tpu'"):
        plan({"devices": ["tpu"]})


def test_no_matching_scenario_is_a_plan_error() -> None:
    with pytest.raises(PlanError, match="no scenario matches other/\\*"):
        plan({"scenarios": "other/*"})


def test_scenario_globs_words_and_exact_names() -> None:
    assert [s.name for s in select_scenarios(SCENARIOS, "family/s[12]")] == ["family/s1", "family/s2"]
    assert [s.name for s in select_scenarios(SCENARIOS, ["family/s4", "family/s0"])] == ["family/s0", "family/s4"]
    assert [s.name for s in select_scenarios(SCENARIOS, "s3")] == ["family/s3"]  # a plain word: a substring
    assert select_scenarios(SCENARIOS, None) == list(SCENARIOS)
    longer = (*SCENARIOS, ScenarioInfo(name="family/s1/closure"))
    assert [s.name for s in select_scenarios(longer, "family/s1")] == ["family/s1", "family/s1/closure"]
    assert [s.name for s in select_scenarios(longer, exact_pattern("family/s1"))] == ["family/s1"]


def test_jobs_are_one_backend_one_device_and_a_chunk() -> None:
    result = plan({"devices": ["cpu", "cuda:1"]})
    assert len(result.jobs) == 2 * 2 * 3  # devices × backends × ceil(5 / 2)
    for job in result.jobs:
        assert len(job.scenarios) <= 2
        assert job.queue == queue_for_device(job.device)
    covered = [(job.device, job.backend, name) for job in result.jobs for name in job.scenarios]
    assert len(covered) == len(set(covered)) == 2 * 2 * 5


def test_cell_count_follows_each_scenarios_dtypes_unless_the_run_names_them() -> None:
    assert plan().cell_count == 2 * (4 * 2 + 1)  # two backends; s4 declares float64 only
    assert plan({"dtypes": ["float64", "float32"]}).cell_count == 2 * 5 * 2  # undeclared: a skip cell


def test_job_cells_and_a_scenario_the_checkout_no_longer_declares() -> None:
    declared = {"a": ("float64", "float32"), "b": ("float64",)}
    assert job_cells(["a", "b"], declared, None) == [("a", "float64"), ("a", "float32"), ("b", "float64")]
    assert job_cells(["a", "gone"], declared, ("float32",)) == [("a", "float32"), ("gone", "float32")]
    assert job_cells(["gone"], declared, None) == [("gone", "float64")]


def test_chunked() -> None:
    assert list(chunked(["a", "b", "c"], 2)) == [("a", "b"), ("c",)]
    with pytest.raises(ValueError):
        list(chunked(["a"], 0))


@pytest.mark.parametrize(("device", "queue"), [("cpu", "cpu"), ("cuda", "cuda"), ("cuda:3", "cuda"),
                                               ("cuda.sm90", "cuda.sm90")])
def test_queues_by_device(device: str, queue: str) -> None:
    assert queue_for_device(device) == queue


SCOPES = {"jax-rev": BackendScope("jax"), "torch-rev": BackendScope("torch"), "fd": BackendScope("numpy")}


def test_a_single_framework_scenario_has_no_jobs_of_the_other_frameworks_backends() -> None:
    torch_only = ScenarioInfo(name="rules/torch", dtypes=("float64", "float32"), lacks=("jax",))
    both = ScenarioInfo(name="rules/both", dtypes=("float64", "float32"))
    result = divide_into_jobs((torch_only, both), run_matrix=Matrix.of(backends=["jax-rev", "torch-rev", "fd"]),
                      file_matrix=Matrix(), available_backends=KNOWN, known_backends=KNOWN, scopes=SCOPES)
    checked = {(job.backend, name) for job in result.jobs for name in job.scenarios}
    assert ("jax-rev", "rules/torch") not in checked  # not listed as skips: not made at all
    assert {("torch-rev", "rules/torch"), ("fd", "rules/torch"), ("jax-rev", "rules/both")} <= checked
    assert result.omitted == 2  # jax-rev × its two dtypes, counted for the summary
    assert result.cell_count == 3 * 2 * 2 - 2
    with pytest.raises(PlanError, match="no backend of jax-rev checks the chosen scenarios"):
        divide_into_jobs((torch_only,), run_matrix=Matrix.of(backends=["jax-rev"]), file_matrix=Matrix(),
                 available_backends=KNOWN, known_backends=KNOWN, scopes=SCOPES)


def test_a_second_order_only_backend_gets_jobs_of_second_order_scenarios_only() -> None:
    gradient = ScenarioInfo(name="f/gradient", operator="gradient", dtypes=("float64",))
    hvp = ScenarioInfo(name="f/hvp", operator="hvp", dtypes=("float64",))
    scopes = {**SCOPES, "jax-fwd-rev": BackendScope("jax", ("hvp", "hessian", "second_derivative"))}
    known = [*KNOWN, "jax-fwd-rev"]
    result = divide_into_jobs((gradient, hvp), run_matrix=Matrix.of(backends=["jax-rev", "jax-fwd-rev"]),
                              file_matrix=Matrix(), available_backends=known, known_backends=known, scopes=scopes)
    checked = {(job.backend, name) for job in result.jobs for name in job.scenarios}
    assert checked == {("jax-rev", "f/gradient"), ("jax-rev", "f/hvp"), ("jax-fwd-rev", "f/hvp")}
    assert result.omitted == 1  # jax-fwd-rev × the gradient's one dtype: counted, not a skip cell
