"""Scenarios of one run are isolated from each other's process-wide framework state: what a module
changes at import, or its scenario while its cells run, is restored before the next module's
scenarios, and named on the cells of the one that made it."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

import gradci
from gradci.scenarios.adapters import global_state
from gradci.scenarios.authoring.project import load_project, load_scenarios

pytest.importorskip("torch")
pytest.importorskip("jax")

PROJECT = Path(__file__).resolve().parent.parent.parent / "data" / "projects" / "global_state"
PLANTED = ["torch default dtype", "TF32 matmuls", "float32 matmul precision", "jax_default_matmul_precision",
           "numpy error state", "numpy's global random state", "Python's global random state",
           "torch's global random state"]


@pytest.fixture(autouse=True)
def fresh_modules(monkeypatch: pytest.MonkeyPatch):
    """Each test imports the project's modules anew, as each runner does once."""
    for name in ("changes_state", "sees_state"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    from gradci.scenarios.adapters import get_framework
    get_framework("torch"), get_framework("jax")  # configured as the engine runs them, before any baseline


def cells_by_scenario() -> dict[str, list]:
    scenarios = load_scenarios(load_project(PROJECT))
    report = gradci.check(scenarios, backends=["torch-rev", "jax-rev"], devices=["cpu"], dtypes=["float64"])
    found: dict[str, list] = {}
    for cell in report.cells:
        found.setdefault(cell.scenario, []).append(cell)
    return found


def test_a_later_module_sees_none_of_an_earlier_modules_changes():
    before = global_state.capture()
    found = cells_by_scenario()
    for name in ("sees/first", "sees/switches", "sees/after"):
        assert all(c.status == "pass" for c in found[name]), [(c.backend, c.message) for c in found[name]]
    assert global_state.changes(before, global_state.capture()) == []  # the test process is left as it was


def test_each_change_is_named_on_the_cells_of_the_module_that_made_it():
    found = cells_by_scenario()
    for cell in found["changes/sin"]:
        for planted in PLANTED:
            assert planted in cell.warnings, (planted, cell.warnings)
        assert "when its module was imported" in cell.warnings
    assert all("gradci:" not in c.warnings for c in found["sees/first"])
    switches = found["sees/switches"][0].warnings
    assert "TF32 matmuls" in switches and "while this scenario's cells ran" in switches
    assert all("gradci:" not in c.warnings for c in found["sees/after"])


def test_without_restoring_the_state_leaks(monkeypatch: pytest.MonkeyPatch):
    """What the tests above guard against, shown: with nothing restored, a later module sees it all."""
    before = global_state.capture()
    monkeypatch.setattr(global_state, "restore", lambda state, current=None: None)
    try:
        found = cells_by_scenario()
    finally:
        monkeypatch.undo()
        global_state.restore(before)
    assert all(c.status == "error" and "leaked into this module" in c.message for c in found["sees/first"])
