"""Counts in messages read right for one and for many, the engine's power lines among them."""
from __future__ import annotations

import pytest

from gradci.scenarios.contract.wording import count_of, plural
from gradci.scenarios.rules.power import MISSED, SCALE, SIGN, PlantPower, PlantResult, Reacher


@pytest.mark.parametrize(("count", "said"), [(0, "0 cells"), (1, "1 cell"), (2, "2 cells"), (-1, "-1 cells")])
def test_a_count_takes_the_singular_only_for_one(count, said):
    assert count_of(count, "cell") == said


def test_irregular_plurals_and_verbs_are_given_whole():
    assert count_of(1, "cell that reaches it", "cells that reach it") == "1 cell that reaches it"
    assert count_of(3, "cell that reaches it", "cells that reach it") == "3 cells that reach it"
    assert [plural(n, "passes", "pass") for n in (1, 2)] == ["passes", "pass"]


def _plant(kind: str, dtypes: list[str]) -> PlantPower:
    result = PlantResult("ops.py::Mul", "backward", 1, 2, kind, MISSED)
    return PlantPower("ops.py::Mul", "backward", 1, 2, kind,
                      [Reacher("s", "torch-rev", "cpu", dtype, 1e-7, 1e-9, result) for dtype in dtypes])


def test_a_perturbation_one_cell_misses_names_that_cell_in_the_singular():
    one = _plant(SIGN, ["float64"]).finding()
    assert one is not None and "the 1 cell that reaches it (float64) passes with it: no cell compares" in one
    two = _plant(SIGN, ["float32", "float64"]).finding()
    assert two is not None and "the 2 cells that reach it (float32, float64) pass with it" in two
    missed = _plant(SCALE, ["float64"]).finding()
    assert missed is not None and "the 1 cell that reaches it (float64) passes with it" in missed
