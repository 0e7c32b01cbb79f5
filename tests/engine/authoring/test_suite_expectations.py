"""gradci.toml's [[expect]]: suite-wide expected failures, applied like a scenario's own."""
from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

import gradci
from gradci.scenarios.authoring.project import ProjectError, load_project, load_scenarios

PROJECT = Path(__file__).resolve().parent.parent.parent / "data" / "projects" / "suite_expectations"


def statuses(root: Path) -> dict[tuple[str, str], gradci.Cell]:
    project = load_project(root)
    report = gradci.check(load_scenarios(project), backends=project.matrix.backends, devices=["cpu"],
                          dtypes=["float64"])
    return {(c.scenario, c.backend): c for c in report.cells}


def test_a_suite_wide_expectation_covers_every_matching_scenario_and_one_that_no_longer_holds_is_xpass():
    pytest.importorskip("torch")
    cells = statuses(PROJECT)
    assert cells["oldstyle/square", "torch-func-rev"].status == "xfail"
    assert "torch.func needs setup_context" in cells["oldstyle/square", "torch-func-rev"].message
    assert cells["oldstyle/square", "torch-rev"].status == "pass"     # the expectation names torch-func-* only
    assert cells["oldstyle/square", "torch-fwd"].status == "pass"     # dual numbers run old-style Functions
    assert cells["fixed/square", "torch-rev"].status == "xpass"       # declared, but it holds no longer
    assert cells["fixed/square", "torch-func-rev"].status == "error"  # no expectation covers it


def test_an_expectation_whose_match_does_not_hold_leaves_the_failure_standing(tmp_path: Path):
    pytest.importorskip("torch")
    root = tmp_path / "project"
    shutil.copytree(PROJECT, root)
    config = root / "gradci.toml"
    config.write_text(config.read_text().replace('match = "setup_context"', 'match = "some other message"'))
    cell = statuses(root)["oldstyle/square", "torch-func-rev"]
    assert cell.status == "error"
    assert "an xfail expects RuntimeError matching 'some other message'" in cell.message


@pytest.mark.parametrize(("table", "says"), [
    ('[[expect]]\nscenario = "a/*"\n', "needs a reason"),
    ('[[expect]]\nreason = "x"\nbackends = "torch-rev"\n', "unknown field 'backends'"),
    ('[[expect]]\nreason = "x"\nmatch = "("\n', "match is not a regular expression"),
    ('[[expect]]\nreason = 3\n', "reason must be a non-empty string"),
    ('expect = "all"\n', "expect must be an array of tables"),
])
def test_a_broken_expect_table_is_one_line_naming_it(tmp_path: Path, table: str, says: str):
    top, tables = (table, "") if not table.startswith("[[") else ("", table)  # a top-level key goes first
    (tmp_path / "gradci.toml").write_text(top + '[scenarios]\nmodules = ["m"]\n' + tables)
    with pytest.raises(ProjectError, match=says):
        load_project(tmp_path)


def test_a_module_with_no_scenarios_is_an_error_naming_it(tmp_path: Path):
    (tmp_path / "gradci.toml").write_text('[scenarios]\nmodules = ["empty_module"]\n')
    (tmp_path / "empty_module.py").write_text("def scenarios():\n    return []\n")
    with pytest.raises(ProjectError, match="scenario module 'empty_module': scenarios\\(\\) returned no scenarios"):
        load_scenarios(load_project(tmp_path))


def test_each_cell_carries_its_scenarios_reference_time_and_its_modules_import_time():
    pytest.importorskip("torch")
    project = load_project(PROJECT)
    cells = gradci.check(load_scenarios(project), backends=["torch-rev"], devices=["cpu"], dtypes=["float64"]).cells
    assert cells and all(c.import_ms is not None and c.import_ms > 0 for c in cells)
    assert all(c.reference_ms is not None and c.reference_ms >= 0 for c in cells)
    in_process = gradci.check([gradci.Scenario("plain", "gradient", lambda x: (x ** 2).sum(), np.ones(2))],
                              backends=["fd"], devices=["cpu"], dtypes=["float64"]).cells
    assert in_process[0].import_ms is None and in_process[0].reference_ms > 0
