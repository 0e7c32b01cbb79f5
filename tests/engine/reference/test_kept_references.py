"""References kept for later runs: what computing one read, and an offered one used instead of computing.

A reference is computed by finite differences from f alone: its dependency record must name the code
its evaluations ran (a helper f calls, two modules away), so that an edit of that code recomputes it,
while an edit of code only the derivative rules run (a backward) leaves it valid. Offered back, it is
used for the scenario whose cache key it names, and for no other.
"""
from __future__ import annotations

import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from gradci.scenarios.affected.carry import ENVIRONMENT_KEY, CommitInputs
from gradci.scenarios.affected.environment import environment
from gradci.scenarios.reference.answer import ReferenceCache
from gradci.scenarios.rules.tracing import RuleTracer, tracing
from tests.engine.rules.projects import imported_copy

HELPERS = '''
import functools

CALLS = []


@functools.cache
def scale():
    return 1.0


def unit():
    CALLS.append(1)
    return 1.0


def factor():
    return 2.0
'''

MODEL = '''
import numpy as np

from gradci import Scenario
from keptref import helpers


def f(x):
    return np.sum(x * x) * helpers.unit() * helpers.scale()


def scenarios():
    return [Scenario("square/gradient", "gradient", f, np.array([0.3, -0.2, 0.7]), dtypes=("float64",))]
'''


@pytest.fixture
def project(tmp_path: Path) -> Iterator[tuple[Path, object]]:
    source = tmp_path / "source"
    (source / "keptref").mkdir(parents=True)
    (source / "keptref" / "__init__.py").write_text("")
    (source / "keptref" / "helpers.py").write_text(textwrap.dedent(HELPERS))
    (source / "keptref" / "model.py").write_text(textwrap.dedent(MODEL))
    (source / "gradci.toml").write_text('[scenarios]\nmodules = ["keptref.model"]\n')
    for root, scenarios in imported_copy(source, "keptref", tmp_path):
        yield root, scenarios["square/gradient"]


def calls() -> list[int]:
    return sys.modules["keptref.helpers"].CALLS


def kept(root: Path, scenario: object) -> tuple[ReferenceCache, list]:
    tracer, references = RuleTracer(root), ReferenceCache()
    tracer.records_references = True
    with tracing(tracer):
        assert not references.answer(scenario).error
    return references, references.kept_for_later()


def test_a_kept_reference_names_the_helper_its_evaluations_ran(project):
    root, scenario = project
    _, [reference] = kept(root, scenario)
    assert reference.key == scenario.cache_key()
    assert "unit" in reference.depends["files"]["keptref/helpers.py"]["kept"]
    now = environment(root)
    depends = {**reference.depends, ENVIRONMENT_KEY: now}
    assert CommitInputs(root).changed(depends, now) is None
    helpers = root / "keptref" / "helpers.py"
    # An edit of code only a rule would run (factor) leaves it valid; one of what f ran does not.
    helpers.write_text(textwrap.dedent(HELPERS).replace("return 2.0", "return 1.0 + 1.0"))
    assert CommitInputs(root).changed(depends, now) is None
    helpers.write_text(textwrap.dedent(HELPERS).replace("return 1.0", "return 2.0 - 1.0"))
    assert CommitInputs(root).changed(depends, now) == "keptref/helpers.py changed"


def test_an_offered_reference_is_used_for_its_key_only(project):
    root, scenario = project
    computed, [reference] = kept(root, scenario)
    evaluations = len(calls())
    offered = ReferenceCache()
    offered.offer(reference.key, reference.payload, "run 7 at abc1234")
    answer = offered.answer(scenario)
    assert len(calls()) == evaluations  # f was not evaluated: the reference came as it was computed
    assert answer.carried_from == "run 7 at abc1234"
    assert answer.description[0].endswith(", carried from run 7 at abc1234")
    assert [ref.full.tolist() for ref in answer.refs] == [ref.full.tolist() for ref in computed.answer(scenario).refs]
    assert offered.kept_for_later() == []  # nothing computed, nothing to keep
    for key, payload in ((reference.key + "/other", reference.payload), (reference.key, b"not a reference")):
        elsewhere = ReferenceCache()
        elsewhere.offer(key, payload, "run 7 at abc1234")
        assert elsewhere.answer(scenario).carried_from is None  # another key, or unreadable: computed
        assert len(calls()) > evaluations
        evaluations = len(calls())


def test_nothing_is_kept_where_the_run_does_not_keep_references(project):
    root, scenario = project
    tracer, references = RuleTracer(root), ReferenceCache()
    with tracing(tracer):
        references.answer(scenario)
    assert references.kept_for_later() == []


def test_a_value_an_earlier_cell_cached_is_computed_again_and_recorded(project):
    root, scenario = project
    sys.modules["keptref.model"].f(scenario.x)  # an earlier cell ran f: scale() is cached
    _, [reference] = kept(root, scenario)
    assert "scale" in reference.depends["files"]["keptref/helpers.py"]["kept"]
