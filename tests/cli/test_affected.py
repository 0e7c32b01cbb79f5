"""``gradci check --base``: only the cells a change can affect re-run, the rest carried (issue 32).

The project (tests/data/projects/affected) has a torch rule whose backward reads a helper two modules
away from the scenarios, a jax custom_vjp behind a module-level ``jax.jit`` (its Python runs only
when traced), weights read from a data file through a cache of the project's own, a module no
scenario imports and a README. One base check writes the cells with their dependency records; each
test edits a copy of the project and checks it against that base, as a user's next commit would.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from gradci.scenarios.affected.carry import CARRIED_KEY
from gradci.scenarios.affected.recording import DEPENDS_KEY
from tests.support.projects import gradci_check, project_copy

pytest.importorskip("torch")
pytest.importorskip("jax")

SCALED = {("scaled/gradient", "torch-rev"), ("scaled/gradient", "torch-func-rev")}
WEIGHTED = {("weighted/gradient", b) for b in ("torch-rev", "torch-func-rev", "jax-rev", "jax-rev-jit")}
JITTED = {("jitted/gradient", "jax-rev"), ("jitted/gradient", "jax-rev-jit")}
PLAIN = {("plain/gradient", b) for b in ("torch-rev", "torch-func-rev", "jax-rev", "jax-rev-jit")}
ERROR = ("scaled/gradient", "torch-func-rev")  # an autograd.Function without setup_context under torch.func
VERDICT = ("status", "message", "max_abs_err", "max_rel_err", "atol", "rtol", "reference", "precision")


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> tuple[Path, Path]:
    """The project and its base check's JSON."""
    root = project_copy("affected", tmp_path_factory.mktemp("base") / "project")
    out = root.parent / "base.json"
    done = gradci_check(root, "--format", "json", "-o", str(out))
    assert done.returncode == 1, done.stderr  # the torch.func cell of the rule is an error
    cells = json.loads(out.read_text())
    assert {(c["scenario"], c["backend"]) for c in cells} == SCALED | WEIGHTED | JITTED | PLAIN
    assert {(c["scenario"], c["backend"]) for c in cells if c["status"] != "pass"} == {ERROR}
    assert all(DEPENDS_KEY in c for c in cells)
    return root, out


def edited(base: tuple[Path, Path], tmp_path: Path, edits: dict[str, tuple[str, str] | str]) -> Path:
    """A copy of the base project with ``edits``: a file's (old, new) text, or its new whole text."""
    root = tmp_path / "project"
    shutil.copytree(base[0], root)
    for name, edit in edits.items():
        path = root / name
        if isinstance(edit, str):
            path.write_text(edit)
        else:
            text = path.read_text()
            assert edit[0] in text, (name, edit)
            path.write_text(text.replace(*edit))
    return root


def checked(root: Path, base_json: Path, *extra: str) -> dict[tuple[str, str], dict]:
    out = root.parent / "next.json"
    done = gradci_check(root, "--base", str(base_json), "--format", "json", "-o", str(out), *extra)
    assert done.returncode in (0, 1), done.stderr
    return {(c["scenario"], c["backend"]): c for c in json.loads(out.read_text())}


def carried(cells: dict[tuple[str, str], dict]) -> set[tuple[str, str]]:
    return {key for key, cell in cells.items() if CARRIED_KEY in cell}


def failing(cells: dict[tuple[str, str], dict]) -> set[tuple[str, str]]:
    return {key for key, cell in cells.items() if cell["status"] == "fail"}


def test_nothing_changed_carries_all_but_the_error_and_equals_a_full_run(base, tmp_path):
    root = edited(base, tmp_path, {})
    cells = checked(root, base[1])
    assert carried(cells) == (SCALED | WEIGHTED | JITTED | PLAIN) - {ERROR}
    assert cells[("plain/gradient", "jax-rev")][CARRIED_KEY]["reason"] == "inputs unchanged"
    full = checked(root, base[1], "--all")
    assert carried(full) == set()
    for key, cell in cells.items():  # carried and re-run: the same verdict, cell for cell
        assert {f: cell[f] for f in VERDICT} == {f: full[key][f] for f in VERDICT}, key


def test_files_no_cell_ran_and_docs_carry_everything(base, tmp_path):
    root = edited(base, tmp_path, {
        "README.md": "Rewritten.\n",
        "affproj/unused.py": ("return 0", "return 1"),
        "affproj/rules.py": ("return x + 1", "return x + 2"),  # a function of the rule's file no cell runs
    })
    assert carried(checked(root, base[1])) == (SCALED | WEIGHTED | JITTED | PLAIN) - {ERROR}


def test_a_helper_two_modules_away_reached_only_through_the_rule_reruns_its_cells(base, tmp_path):
    root = edited(base, tmp_path, {"affproj/helpers/scale.py": ("return 2.0", "return 2.02")})
    cells = checked(root, base[1])
    assert carried(cells) == WEIGHTED | JITTED | PLAIN
    assert failing(cells) == {("scaled/gradient", "torch-rev")}  # the bug is found, not carried


def test_a_data_file_the_function_loads_reruns_its_cells(base, tmp_path):
    root = edited(base, tmp_path, {"data/weights.txt": "0.5 1.5 -2.5\n"})
    cells = checked(root, base[1])
    assert carried(cells) == SCALED - {ERROR} | JITTED | PLAIN
    assert {cells[key]["status"] for key in WEIGHTED} == {"pass"}


def test_a_rule_that_runs_only_when_jax_traces_it_is_still_a_dependency(base, tmp_path):
    root = edited(base, tmp_path, {"affproj/jrules.py": ("3.0 * x ** 2 * g", "3.03 * x ** 2 * g")})
    cells = checked(root, base[1])
    assert carried(cells) == SCALED - {ERROR} | WEIGHTED | PLAIN
    assert failing(cells) == JITTED


def test_a_new_module_beside_the_imported_ones_reruns_everything(base, tmp_path):
    root = edited(base, tmp_path, {"affproj/torch.py": "raise ImportError('shadowing')\n"})
    cells = checked(root, base[1])
    assert carried(cells) == set()  # when in doubt, run: a module added where imports look could shadow one


def test_a_wrong_backward_the_record_misses_would_be_carried_and_the_full_record_catches_it(base, tmp_path):
    """The rule reads ``scale.FACTOR``, a module-level constant: the cell runs no line of scale.py for it.

    A record of the lines a cell ran alone misses it: planted here by taking scale.py out of the
    base's records, the wrong backward is carried as a pass. The record of the modules the cell
    loaded (their module-level code always counts) is what re-runs it.
    """
    root = edited(base, tmp_path, {"affproj/helpers/scale.py": ("FACTOR = 1.0", "FACTOR = 1.01")})
    lines_only = tmp_path / "lines-only.json"
    cells = json.loads(base[1].read_text())
    for cell in cells:
        cell[DEPENDS_KEY]["files"].pop("affproj/helpers/scale.py")
    lines_only.write_text(json.dumps(cells))
    missed = checked(root, lines_only)
    assert ("scaled/gradient", "torch-rev") in carried(missed)
    assert missed[("scaled/gradient", "torch-rev")]["status"] == "pass"  # the hole: a wrong rule passes
    caught = checked(root, base[1])
    assert ("scaled/gradient", "torch-rev") not in carried(caught)
    assert failing(caught) == {("scaled/gradient", "torch-rev")}


def test_a_base_without_records_is_refused_with_what_to_do(base, tmp_path):
    plain = tmp_path / "plain.json"
    plain.write_text(json.dumps([{k: v for k, v in c.items() if k != DEPENDS_KEY}
                                 for c in json.loads(base[1].read_text())]))
    done = gradci_check(base[0], "--base", str(plain))
    assert done.returncode == 2
    assert "no dependency records" in done.stderr and "--format json" in done.stderr
