"""`gradci check`'s rule coverage as a user runs it: the sandboxed runner, the summary, the report file."""
from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.support.projects import gradci_check, project_copy

pytestmark = pytest.mark.slow  # gradci check subprocesses: seconds apiece


@pytest.fixture
def project(tmp_path) -> Path:
    return project_copy("rule_coverage", tmp_path / "project")


def select_in_gradci_toml(project: Path, pattern: str) -> None:
    """The repository's own selection (its [matrix] scenarios), not a flag's."""
    toml = project / "gradci.toml"
    toml.write_text(toml.read_text().replace("[matrix]\n", f"[matrix]\nscenarios = [{pattern!r}]\n"))


def test_check_prints_the_findings_fails_on_them_and_writes_cobertura(project, tmp_path):
    report = tmp_path / "rules.xml"
    select_in_gradci_toml(project, "cube")
    out = gradci_check(project, "--cov-report", str(report))
    assert out.returncode == 1, out.stderr
    text = " ".join(out.stdout.split())  # rich folds long lines
    assert "failing: Cube (torch.autograd.Function, rulecov/ops.py): backward exercised, jvp never" in text
    assert "not exercised by any scenario" in text  # Square and WrongSquare: no scenario of "cube" reaches them
    assert "3 pass 0 fail" in text  # the cells themselves all pass: the finding is its own line
    hits = {int(line.attrib["number"]): int(line.attrib["hits"]) for c in ET.parse(report).iter("class")
            if c.get("filename") == "rulecov/ops.py" for line in c.iter("line")}
    source = (project / "rulecov" / "ops.py").read_text().splitlines()
    backward = next(n for n, line in enumerate(source, 1) if "return 3 * x ** 2 * g" in line)
    jvp = next(n for n, line in enumerate(source, 1) if "return 3 * x ** 2 * t" in line)
    assert hits[backward] == 1 and hits[jvp] == 0


def test_a_check_narrowed_by_flags_reports_its_findings_without_failing_on_them(project):
    out = gradci_check(project, "-k", "cube")  # square/* exist: only this check left them out
    assert out.returncode == 0, out.stdout + out.stderr
    text = " ".join(out.stdout.split())
    assert "warning: Square" in text and "this check ran a selection (-k cube)" in text


def test_warning_severity_reports_without_failing_and_no_rules_turns_it_off(project):
    with (project / "gradci.toml").open("a") as toml:
        toml.write('\n[rules]\nunexercised = "warning"\n')
    out = gradci_check(project, "-k", "cube")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "warning: Cube" in " ".join(out.stdout.split())
    out = gradci_check(project, "-k", "cube", "--no-rules")
    assert out.returncode == 0 and "derivative rules" not in out.stdout


def test_a_report_name_without_a_format_is_a_usage_error(project, tmp_path):
    out = gradci_check(project, "--cov-report", str(tmp_path / "rules.txt"))
    assert out.returncode == 2 and "*.xml (Cobertura) or *.info / *.lcov (LCOV)" in out.stderr


NO_RULES = '''
import numpy as np
import torch

from gradci import Scenario


def scenarios():
    return [Scenario("tanh/gradient", "gradient", {"torch": lambda v: torch.tanh(v).sum()}, np.array([0.3, 0.7]))]
'''


def test_a_repository_without_rules_of_its_own_is_told_so(tmp_path):
    """Rules in an installed package (bench/real_libraries' case) are not the repository's: say so, not nothing."""
    root = tmp_path / "plain"
    (root / "plain").mkdir(parents=True)
    (root / "plain" / "__init__.py").write_text("")
    (root / "plain" / "scenarios.py").write_text(NO_RULES)
    (root / "gradci.toml").write_text('[scenarios]\nmodules = ["plain.scenarios"]\n\n'
                                      '[matrix]\nbackends = ["torch-rev"]\ndtypes = ["float64"]\n')
    out = gradci_check(root)
    assert out.returncode == 0, out.stderr  # it is information, not a finding
    text = " ".join(out.stdout.split())
    assert "rules: no derivative rule" in text and "rules in installed packages are not measured" in text
    quiet = gradci_check(root, "--no-rules")
    assert "rules:" not in quiet.stdout
