"""``@gradci.scenario_tests``: scenarios beside tests, with no gradci.toml.

In a pytest test module, a function so decorated returns scenarios; gradci's pytest plugin makes
each of their cells a test item of that module, checked in the sandboxed runner. Standard library
only: decorating imports nothing."""
from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

F = TypeVar("F", bound=Callable[..., object])
MARK = "__gradci_scenarios__"  # what the plugin looks for (gradci.pytest_plugin.ITEM_MARK)


def scenario_tests(function: F) -> F:
    """Mark ``function`` (no arguments, returning a list of Scenario) as a source of test items."""
    setattr(function, MARK, True)
    return function
