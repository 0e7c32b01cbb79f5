"""Affected cells in the engine: file digests over the functions a cell entered, and the carry decision.

Each claim comes with its twin: an edit a cell could see changes the digest (and re-runs the cell), an
edit it could not see leaves both alone.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from gradci.scenarios.affected.carry import CARRIED_KEY, CommitInputs, carry_planned, plan_carry
from gradci.scenarios.affected.environment import differences, environment
from gradci.scenarios.affected.recording import DEPENDS_KEY
from gradci.scenarios.affected.source_digest import UNPARSEABLE, entered_functions, function_spans, python_digest

SOURCE = '''\
import functools

LIMIT = 3


class Rule:
    @staticmethod
    def backward(g):
        return 2 * g

    @staticmethod
    def jvp(t):
        def inner(u):
            return u + 1
        return inner(t)


@functools.cache
def helper(x):
    return x + LIMIT
'''


def digest(source: str, kept: set[str]) -> str:
    return python_digest(source.encode(), kept)


def test_a_function_counts_when_its_body_ran_and_its_inner_functions_with_it():
    lines = {9}  # Rule.backward's return
    assert entered_functions(function_spans(SOURCE), lines) == {"Rule.backward"}
    assert entered_functions(function_spans(SOURCE), {14}) == {"Rule.jvp", "Rule.jvp.<locals>.inner"}
    assert entered_functions(function_spans(SOURCE), {15}) == {"Rule.jvp"}
    assert entered_functions(function_spans(SOURCE), {3, 6}) == set()  # module-level lines enter no function


def test_an_edit_inside_a_function_that_ran_changes_the_digest_and_one_elsewhere_does_not():
    kept = {"Rule.backward"}
    edited_backward = SOURCE.replace("return 2 * g", "return 2.01 * g")
    edited_jvp = SOURCE.replace("return u + 1", "return u + 2")
    assert digest(edited_backward, kept) != digest(SOURCE, kept)
    assert digest(edited_jvp, kept) == digest(SOURCE, kept)
    assert digest(edited_jvp, {"Rule.jvp"}) != digest(SOURCE, {"Rule.jvp"})


def test_module_level_code_signatures_and_decorators_always_count():
    for edit in (("LIMIT = 3", "LIMIT = 4"), ("@functools.cache", "@functools.lru_cache(1)"),
                 ("def helper(x):", "def helper(x, y=1):")):
        assert digest(SOURCE.replace(*edit), set()) != digest(SOURCE, set()), edit


def test_comments_blank_lines_and_moved_lines_do_not_count():
    moved = "# a comment\n\n" + SOURCE.replace("return 2 * g", "return 2 * g  # why")
    assert digest(moved, {"Rule.backward"}) == digest(SOURCE, {"Rule.backward"})



def test_a_text_is_parsed_once_per_set_of_functions_and_an_edit_is_parsed_again(monkeypatch):
    """A pull request's planner asks three times for the same digests (carry it whole? which cells? which
    references?): one parse per text and set of functions. The text is the key: an edited file is
    digested again, never answered from what its old text came to."""
    import ast

    parsed: list[object] = []
    real = ast.parse
    monkeypatch.setattr(ast, "parse", lambda source, *a, **k: parsed.append(source) or real(source, *a, **k))
    text = SOURCE.replace("LIMIT = 3", "LIMIT = 33")  # a text no other test digested in this process
    first = digest(text, {"Rule.backward"})
    assert digest(text, {"Rule.backward"}) == first and len(parsed) == 1
    assert digest(text, {"Rule.jvp"}) != first and len(parsed) == 2
    edited = text.replace("return 2 * g", "return 3 * g")
    assert digest(edited, {"Rule.backward"}) != first and len(parsed) == 3

def test_a_file_that_does_not_parse_counts_byte_for_byte():
    broken = SOURCE + "def (:\n"
    assert digest(broken, set()).startswith(UNPARSEABLE)
    assert digest(broken + " ", set()) != digest(broken, set())


# The carry decision, over a project folder of one file.

def project(tmp_path: Path, source: str = SOURCE) -> Path:
    root = tmp_path / "project"
    root.mkdir(exist_ok=True)
    (root / "rules.py").write_text(source)
    (root / "weights.txt").write_text("1 2 3\n")
    return root


def base_cell(root: Path, backend: str = "torch-rev", dtype: str = "float64", status: str = "pass",
              kept: tuple[str, ...] = ("Rule.backward",)) -> dict:
    return {"scenario": "s", "backend": backend, "device": "cpu", "dtype": dtype, "status": status,
            DEPENDS_KEY: {"scenario": "fp", "environment": environment(root),
                          "files": {"rules.py": {"digest": digest((root / "rules.py").read_text(), set(kept)),
                                                 "kept": list(kept)}},
                          "data": {"weights.txt": __import__("hashlib").sha256(b"1 2 3\n").hexdigest()}}}


def carry(cells: list[dict], root: Path, env=None, fingerprint: str = "fp"):
    return plan_carry(cells, {"s": fingerprint}, CommitInputs(root), lambda device: env or environment(root),
                      {"run": 7, "sha": "abc"})


def test_unchanged_inputs_are_carried_with_their_provenance(tmp_path):
    root = project(tmp_path)
    plan = carry([base_cell(root)], root)
    assert plan.rerun == {} and plan.carried[0][CARRIED_KEY] == {"run": 7, "sha": "abc", "reason": "inputs unchanged"}
    # carried again, a cell keeps where it was computed
    again = carry(plan.carried, root)
    assert again.carried[0][CARRIED_KEY]["run"] == 7


def test_an_error_is_always_rerun_and_takes_its_group_with_it(tmp_path):
    root = project(tmp_path)
    plan = carry([base_cell(root), base_cell(root, dtype="float32", status="error")], root)
    assert plan.carried == [] and plan.rerun == {("s", "torch-rev", "cpu"): "its result was an error"}


# Which planned groups the base carries: one decision for `gradci check --base` and the service.

GROUP = ("s", "torch-rev", "cpu")


def test_a_planned_group_is_carried_only_when_the_base_has_every_dtype_planned(tmp_path):
    root = project(tmp_path)
    both = [base_cell(root), base_cell(root, dtype="float32")]
    decided = carry_planned(carry(both, root), {GROUP: ("float32", "float64")})
    assert decided.rerun == {} and [cell["dtype"] for cell in decided.taken[GROUP]] == ["float32", "float64"]
    lacking = carry_planned(carry(both[:1], root), {GROUP: ("float64", "float32")})
    assert lacking.taken == {} and lacking.rerun == {GROUP: "the base run lacks some of its dtypes"}
    absent = carry_planned(carry(both, root), {("s", "torch-fwd", "cpu"): ("float64",)})
    assert absent.taken == {} and absent.rerun == {("s", "torch-fwd", "cpu"): "not in the base run"}


@pytest.mark.parametrize("message", ["ValueError: bad input", "timed out after 60 s"])
def test_a_planned_group_whose_base_has_an_error_or_a_timeout_reruns_whole(tmp_path, message):
    root = project(tmp_path)
    cells = [base_cell(root), {**base_cell(root, dtype="float32", status="error"), "message": message}]
    decided = carry_planned(carry(cells, root), {GROUP: ("float64", "float32")})
    assert decided.taken == {} and decided.rerun == {GROUP: "its result was an error"}


def test_a_rule_edit_reruns_what_ran_it_and_an_edit_elsewhere_carries(tmp_path):
    root = project(tmp_path)
    cells = [base_cell(root), base_cell(root, backend="torch-fwd", kept=("Rule.jvp",))]
    (root / "rules.py").write_text(SOURCE.replace("return 2 * g", "return 2.01 * g"))
    plan = carry(cells, root)
    assert plan.rerun == {("s", "torch-rev", "cpu"): "rules.py changed"}
    assert [cell["backend"] for cell in plan.carried] == ["torch-fwd"]


def test_data_files_the_scenario_changes_and_vanished_files_rerun(tmp_path):
    root = project(tmp_path)
    cell = base_cell(root)
    (root / "weights.txt").write_text("1 2 4\n")
    assert carry([cell], root).rerun[("s", "torch-rev", "cpu")] == "data file weights.txt changed"
    (root / "weights.txt").write_text("1 2 3\n")
    assert carry([cell], root, fingerprint="other").rerun[("s", "torch-rev", "cpu")] == "the scenario changed"
    (root / "rules.py").unlink()
    assert carry([cell], root).rerun[("s", "torch-rev", "cpu")] == "rules.py changed"


def test_a_framework_version_change_reruns_everything_and_says_which(tmp_path):
    root = project(tmp_path)
    cells = [base_cell(root), base_cell(root, backend="torch-fwd", kept=("Rule.jvp",))]
    now = environment(root)
    now["software"] = {**now["software"], "torch": "9.9.9"}
    plan = carry(cells, root, env=now)
    assert plan.carried == [] and len(plan.rerun) == 2
    assert all(f"torch {environment(root)['software']['torch']} → 9.9.9" in why for why in plan.rerun.values())
    toml = environment(root)
    (root / "gradci.toml").write_text("[matrix]\n")
    assert differences(toml, environment(root)) == ["gradci.toml added"]


def test_a_record_naming_a_file_outside_the_checkout_is_never_carried(tmp_path):
    root = project(tmp_path)
    secret = tmp_path / "secret.txt"
    secret.write_text("1 2 3\n")
    os.symlink(secret, root / "link.txt")
    for name in ("../secret.txt", str(secret), "link.txt"):
        cell = base_cell(root)
        cell[DEPENDS_KEY]["data"] = {name: __import__("hashlib").sha256(b"1 2 3\n").hexdigest()}
        assert carry([cell], root).rerun, name  # never read: the digest of what is outside is not asked


@pytest.mark.parametrize("record", [None, {"scenario": "fp"}])
def test_a_cell_without_a_record_or_an_environment_reruns(tmp_path, record):
    root = project(tmp_path)
    cell = base_cell(root)
    cell[DEPENDS_KEY] = record
    assert carry([cell], root).rerun


def test_the_function_that_made_a_rule_counts_with_the_rule():
    source = "def make():\n    class F:\n        def backward(g):\n            return 2 * g\n    return F\n"
    kept = entered_functions(function_spans(source), {4})
    assert kept == {"make", "make.<locals>.F.backward"}  # make may have run in another cell, or on import
    assert digest(source.replace("return F", "return None"), kept) != digest(source, kept)


def test_the_recorded_fingerprints_decide_without_listing_only_when_nothing_changed(tmp_path):
    from gradci.scenarios.affected.carry import recorded_fingerprints

    root = project(tmp_path)
    cells = [base_cell(root), base_cell(root, backend="torch-fwd", kept=("Rule.jvp",))]
    assert recorded_fingerprints(cells) == {"s": "fp"}
    assert not carry(cells, root).rerun
    (root / "rules.py").write_text(SOURCE.replace("return u + 1", "return u + 2"))
    assert carry(cells, root).rerun  # some input changed: list the scenarios to know what else did
    cells[1][DEPENDS_KEY]["scenario"] = "other"
    assert recorded_fingerprints(cells) == {"s": None}  # records that disagree decide nothing
