"""One matrix, one selection rule: ``gradci check -k``, ``gradci submit --scenarios``,
``POST /api/runs`` (through the planner) and ``gradci.toml`` select the same scenarios."""
from __future__ import annotations

import functools
import textwrap
from collections.abc import Iterator

import pytest

from gradci.cli.check import gather
from gradci.cli.commands import matrix_of
from gradci.cli.sandboxed import local_jobs, local_runner
from gradci.scenarios import library
from gradci.scenarios.contract.matrix import Matrix
from gradci.services.api.schemas import RunCreate
from gradci.services.planner import ScenarioInfo, divide_into_jobs
from gradci.worker.runner import WarmRunner

# A plain word (a substring), globs, and a list of both.
PATTERNS = ["nn", "conv", "nn/*", "*hessian*", "linalg/*/j?p*", "pytree,*second_derivative*"]


@pytest.fixture(scope="module")
def library_names() -> list[str]:
    return [scenario.name for scenario in library.default()]


@pytest.fixture(scope="module")
def builtin_runner() -> Iterator[WarmRunner]:
    """`gradci check`'s runner for the built-in library, started once: every selection of it lists there."""
    target, timeout_s = gather(None, Matrix(), None, None)
    with local_runner(target, timeout_s) as runner:
        yield runner


def checked_by_cli(repo: str | None, flags: Matrix, runner: WarmRunner | None = None) -> list[str]:
    """The scenarios `gradci check` checks: listed and selected through its runner (``runner``, or its own)."""
    target, timeout_s = gather(repo, flags, None, None)
    if runner is not None:
        return [specs[0].scenario for specs in local_jobs(runner, target).scenarios if specs]
    with local_runner(target, timeout_s) as own:
        return checked_by_cli(repo, flags, own)


@functools.cache
def by_check(patterns: str, runner: WarmRunner) -> list[str]:
    return checked_by_cli(None, matrix_of(scenarios=patterns), runner)


def by_project_file(patterns: str, tmp_path) -> list[str]:
    listed = ", ".join(f'"{pattern}"' for pattern in patterns.split(","))
    (tmp_path / "gradci.toml").write_text(f'[scenarios]\nmodules = ["builtin_library"]\n[matrix]\nscenarios = [{listed}]\n')
    (tmp_path / "builtin_library.py").write_text(textwrap.dedent("""
        from gradci.scenarios import library

        def scenarios():
            return library.default()
    """))
    return checked_by_cli(str(tmp_path), Matrix())


def by_server(patterns: str, names: list[str]) -> list[str]:
    """What `gradci submit --scenarios` sends, as POST /api/runs validates and stores it, and as
    the planner reads it back from the stored run."""
    body = RunCreate.model_validate({k: v for k, v in matrix_of(scenarios=patterns).to_mapping().items() if v})
    stored = Matrix.from_mapping(body.matrix().to_mapping())
    infos = [ScenarioInfo(name=name) for name in names]
    plan = divide_into_jobs(infos, run_matrix=stored, file_matrix=Matrix(), available_backends=["fd"], known_backends=["fd"])
    return [info.name for info in plan.scenarios]


@pytest.mark.parametrize("patterns", PATTERNS)
@pytest.mark.slow
def test_every_entry_point_selects_the_same_scenarios(patterns: str, library_names, builtin_runner,
                                                     tmp_path) -> None:
    expected = by_check(patterns, builtin_runner)
    assert 0 < len(expected) < len(library_names)  # each pattern is a real selection, not all or none
    assert by_project_file(patterns, tmp_path) == expected
    assert by_server(patterns, library_names) == expected


@pytest.mark.slow
def test_a_plain_word_is_a_substring_and_a_glob_matches_the_whole_name(builtin_runner) -> None:
    def by(patterns: str) -> list[str]:
        return by_check(patterns, builtin_runner)

    assert set(by("conv")) > set(by("conv*"))  # "conv" occurs inside the names, not at the start
    assert by("conv*") == []
    assert all("hessian" in name for name in by("*hessian*"))
    assert by("hessian") == by("*hessian*")
