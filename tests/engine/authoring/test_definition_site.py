"""A scenario knows where it was defined: the file and line of its ``Scenario(...)`` call (a check
run's annotation points there), through factories and ``dataclasses.replace``; the runner lists the
file relative to the repository, and nothing outside it."""
from __future__ import annotations

import dataclasses
import inspect

import numpy as np

from gradci import Scenario
from gradci.worker.runner_child import _definition


def square(x):
    return (x ** 2).sum()


def made_by_a_factory(name):
    return Scenario(name, "gradient", square, np.ones(3))  # the line a factory's scenarios point to


def test_the_line_of_the_scenario_call():
    line = inspect.currentframe().f_lineno + 1
    direct = Scenario("direct", "gradient", square, np.ones(3))
    assert direct.defined_at() == (__file__, line)
    factory_line = inspect.getsourcelines(made_by_a_factory)[1] + 1
    assert made_by_a_factory("a").defined_at() == (__file__, factory_line)
    variant = dataclasses.replace(direct, name="direct/variant")
    assert variant.defined_at() == (__file__, inspect.currentframe().f_lineno - 1)


def test_the_listing_names_the_file_relative_to_the_repository(tmp_path):
    inside = tmp_path / "pkg" / "grads.py"
    assert _definition((str(inside), 12), str(tmp_path)) == ("pkg/grads.py", 12)
    assert _definition(("/usr/lib/python3/site-packages/lib.py", 3), str(tmp_path)) == (None, None)
    assert _definition((str(inside), 12), None) == (None, None)  # the built-in library
    assert _definition(None, str(tmp_path)) == (None, None)
