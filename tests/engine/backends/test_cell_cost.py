"""What a check spends: how often a cell's computation runs and what its times then mean (one call
unless timings are asked for), compiled programs reused across cells only where the computation is
the same, and the opt-in op-by-op jax-rev. No assertion is about how long anything took."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import gradci
from gradci import Scenario, namespace
from gradci.scenarios.authoring.project import ProjectError, load_project
from gradci.scenarios.backends import get_backend
from gradci.scenarios.backends.framework_backend import PROGRAMS, KeptPrograms


def counted(calls: list[str], label: str = "f"):
    def f(x):
        calls.append(label)
        return namespace(x).sum(x * x)

    return f


def test_an_eager_cell_runs_once_without_timings_and_repeats_with_them():
    calls: list[str] = []
    s = Scenario("sq", "gradient", {"torch": counted(calls)}, np.array([1.0, 2.0]))

    def check(**options):
        calls.clear()
        (cell,) = gradci.check([s], backends=["torch-rev"], devices=["cpu"], dtypes=["float64"], **options).cells
        assert cell.status == "pass" and cell.first_call_ms > 0, cell.message
        return cell, len(calls)

    check()  # the reference, computed once (and then shared)
    once, calls_once = check()
    assert once.time_ms is None and calls_once == 1
    timed, calls_timed = check(timings=True)
    assert timed.time_ms > 0 and calls_timed > 1


def test_a_compiled_cell_runs_its_program_once_more_for_its_steady_state():
    s = Scenario("sq-jit", "gradient", {"jax": lambda x: namespace(x).sum(x * x)}, np.array([1.0, 2.0]))
    for timings in (False, True):
        (cell,) = gradci.check([s], backends=["jax-rev-jit"], devices=["cpu"], dtypes=["float64"],
                               timings=timings).cells
        assert cell.status == "pass" and cell.first_call_ms > 0 and cell.time_ms > 0


def test_a_compiled_program_is_reused_for_the_same_function_operator_and_contexts():
    PROGRAMS.clear()
    calls: list[str] = []
    f = counted(calls)

    def traces(scenario: Scenario, dtype: str = "float64", backend: str = "jax-rev-jit") -> int:
        before = len(calls)
        get_backend(backend).prepare(scenario, scenario.tangent, "cpu", dtype).call()
        return len(calls) - before

    first = Scenario("a", "gradient", {"jax": f}, np.array([1.0, 2.0]))
    assert traces(first) == 1
    assert traces(first) == 0  # the same cell again: traced and compiled once
    assert traces(Scenario("b", "gradient", {"jax": f}, np.array([3.0, 4.0]))) == 0  # another point
    assert traces(first, "float32") == 1  # another dtype: jit traces it once
    assert traces(Scenario("c", "vjp", {"jax": f}, np.array([1.0, 2.0]), tangent=np.array(1.0))) == 1
    assert traces(first, backend="jax-fwd") == 1  # another backend: its own program
    assert traces(Scenario("d", "gradient", {"jax": counted(calls)}, np.array([1.0, 2.0]))) == 1  # another f


@pytest.mark.parametrize("one, other", [(1, True), (2, 3), ("a", "b")])
def test_contexts_that_are_not_arrays_tell_programs_apart(one, other):
    """Integers, booleans and strings reach f as Python values, constants of its program: a program
    compiled for one (1) is not the program for another (True, equal to 1 and of the same hash)."""
    def scale(flag) -> float:
        return 2.0 if flag is True else 3.0 if flag == 3 else 5.0 if flag == "b" else 1.0

    def f(x, flag):
        return namespace(x).sum(x * x) * scale(flag)

    results = []
    for flag in (one, other):
        s = Scenario(f"flag-{flag!r}", "gradient", {"jax": f}, np.array([1.0, 2.0]), contexts=(flag,))
        prepared = get_backend("jax-rev-jit").prepare(s, None, "cpu", "float64")
        results.append(prepared.to_numpy(prepared.call()))
        (cell,) = gradci.check([s], backends=["jax-rev-jit"], devices=["cpu"], dtypes=["float64"]).cells
        assert cell.status == "pass", cell.message
    np.testing.assert_allclose(results[1], results[0] * scale(other) / scale(one))


def test_a_context_that_is_no_literal_is_never_reused():
    class Knob:  # two of them alike in repr, not in what f computes
        def __init__(self, scale: float):
            self.scale = scale

        def __repr__(self) -> str:
            return "Knob()"

    def f(x, knob):
        return namespace(x).sum(x * x) * knob.scale

    results = []
    for scale in (1.0, 3.0):
        s = Scenario(f"knob-{scale}", "gradient", {"jax": f}, np.array([1.0, 2.0]), contexts=(Knob(scale),))
        prepared = get_backend("jax-rev-jit").prepare(s, None, "cpu", "float64")
        results.append(prepared.to_numpy(prepared.call()))
    np.testing.assert_allclose(results, [[2.0, 4.0], [6.0, 12.0]])


def test_kept_programs_are_bounded_and_drop_the_least_recently_used():
    kept = KeptPrograms(2)
    made: list[str] = []

    def make(name: str):
        return lambda: made.append(name) or name

    assert [kept.get_or_make(k, make(k)) for k in ("a", "b", "a", "c", "b", "a")] == ["a", "b", "a", "c", "b", "a"]
    assert made == ["a", "b", "c", "b", "a"]  # "b" went when "c" came (a was used more recently), then "a"
    assert kept.get_or_make(None, make("x")) == "x" and kept.get_or_make(None, make("x")) == "x"
    assert made[-2:] == ["x", "x"]  # no key: made each time, never kept


def test_timings_in_gradci_toml(tmp_path: Path) -> None:
    (tmp_path / "gradci.toml").write_text('[scenarios]\nmodules = ["m"]\n[check]\ntimings = true\n')
    assert load_project(tmp_path).timings is True
    (tmp_path / "gradci.toml").write_text('[scenarios]\nmodules = ["m"]\n')
    assert load_project(tmp_path).timings is None
    (tmp_path / "gradci.toml").write_text('[scenarios]\nmodules = ["m"]\n[check]\ntimings = "yes"\n')
    with pytest.raises(ProjectError, match=r"\[check\] timings must be true or false, not 'yes'"):
        load_project(tmp_path)


def test_a_runs_own_timings_win_over_the_repositorys(tmp_path: Path) -> None:
    from gradci.scenarios.contract.matrix import Matrix
    from gradci.worker.job_execution import engine_options
    from gradci.worker.sources import RunRef, Source

    (tmp_path / "gradci.toml").write_text('[scenarios]\nmodules = ["m"]\n[check]\nrepeats = 3\ntimings = true\n')
    source = Source(sha="a" * 40, root=str(tmp_path), scenarios=(), backends={}, file_matrix=Matrix())
    builtin = Source(sha=None, root=None, scenarios=(), backends={}, file_matrix=Matrix())
    run = RunRef(id=1, repo_url="/r", revision=None, matrix=Matrix())
    asking = RunRef(id=2, repo_url="/r", revision=None, matrix=Matrix(), options={"timings": False})
    assert engine_options(source, run) == {"repeats": 3, "timings": True}
    assert engine_options(source, asking) == {"repeats": 3, "timings": False}
    assert engine_options(builtin, asking) == {"timings": False}


def test_a_run_request_may_ask_for_timings() -> None:
    from gradci.services.api.schemas import RunCreate

    assert RunCreate(timings=True).options() == {"timings": True}
    assert RunCreate(repeats=2).options() == {"repeats": 2}
    assert RunCreate().options() == {}


def test_jax_rev_is_opt_in_where_no_backends_are_named():
    from gradci.scenarios.check import resolve_backends

    defaults = [backend.name for backend in resolve_backends(None)]
    assert "jax-rev" not in defaults and {"jax-rev-jit", "jax-fwd", "torch-rev"} <= set(defaults)
    s = Scenario("sq-any", "gradient", lambda x: namespace(x).sum(x * x), np.array([1.0, 2.0]))
    assert "jax-rev" not in {cell.backend for cell in gradci.check([s], devices=["cpu"], dtypes=["float64"]).cells}
    (named,) = gradci.check([s], backends=["jax-rev"], devices=["cpu"], dtypes=["float64"]).cells
    assert named.status == "pass"


def test_the_runner_says_which_backends_are_defaults_and_gradci_check_and_the_service_follow() -> None:
    from types import SimpleNamespace

    from gradci.cli.sandboxed import Target, local_jobs
    from gradci.scenarios.contract.matrix import Matrix
    from gradci.worker.sources import Source

    entries = {name: {"name": name, "framework": "jax", "mode": "reverse", "unavailable": None, "default": default}
               for name, default in (("jax-rev", False), ("jax-rev-jit", True))}
    entries["old"] = {"name": "old", "framework": "numpy", "mode": "finite", "unavailable": None}  # no field: a default
    source = Source(sha=None, root=None, scenarios=(), backends=entries, file_matrix=Matrix())
    assert source.available_backends == ["jax-rev-jit", "old"]

    listing = SimpleNamespace(scenarios=[{"name": "s", "dtypes": ["float64"], "operator": "gradient",
                                          "fingerprint": "f", "function": "g"}],
                              backends=list(entries.values()), devices=["cpu"])
    runner = SimpleNamespace(list_source=lambda *args, **kwargs: listing)
    planned = local_jobs(runner, Target(None, Matrix()))  # type: ignore[arg-type]
    assert [spec.backend for spec in planned.scenarios[0]] == ["jax-rev-jit", "old"]
    named = local_jobs(runner, Target(None, Matrix.of(backends=["jax-rev"])))  # type: ignore[arg-type]
    assert [spec.backend for spec in named.scenarios[0]] == ["jax-rev"]
