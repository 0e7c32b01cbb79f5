"""What the reports, the statuses and the check run say of one cell, rule or finding reads in the singular.

Each message is built with a count of one and of two; "1 cells", "1 rules are" and kin must not appear.
"""
from __future__ import annotations

import re

import pytest

from gradci.cli.client import progress_line, waiting_lines
from gradci.services.github.progress import Failure, progress_text
from gradci.services.reports.markdown import carried_line, power_section, rules_section
from gradci.services.reports.pr_report import _patch_status, with_rules
from gradci.services.reports.report_record import (
    CarriedSection,
    CoverageStatus,
    PowerFinding,
    PowerSection,
    RuleFinding,
    RulesSection,
    StatusCounts,
)
from gradci.services.reports.targets import Target

# A count of one followed by a plural noun, or by a noun and a plural verb.
WRONG_ONE = re.compile(r"\b1\**\s+(?:\w+\s+)?(?:cells|rules|perturbations|jobs|attempts)\b|"
                       r"\b1 of these rules are\b|\b1 \w+ this pull request did not change are\b")


def finding(n: int) -> RuleFinding:
    return RuleFinding(rule_id=f"ops.py::R{n}", name=f"R{n}", kind="torch.autograd.Function", file="ops.py",
                       text="not exercised by any scenario", hint="add a scenario", start_line=1, end_line=2,
                       change="added")


def rules(count: int, severity: str = "failure") -> RulesSection:
    return RulesSection(severity=severity, state="failure", compared=True, rule_count=count, changed_count=count,
                        rules=[], findings=[finding(n) for n in range(count)], finding_count=count,
                        other_findings=count)


def power(count: int) -> PowerSection:
    return PowerSection(run_id=1, head_sha="a" * 40, own=True, rule_count=count, finding_count=count,
                        findings=[PowerFinding(rule_id="ops.py::R", name="R", file="ops.py", text="caught by no cell")
                                  for _ in range(count)])


def texts(count: int) -> dict[str, str]:
    project = CoverageStatus(coverage=90.0, base_coverage=None, target=None, state="success", description="90%")
    patch = _patch_status(StatusCounts.of(["pass"] * count), None, Target())
    title, _, _ = progress_text([Failure("s", "torch-rev", "cpu", "float64", "fail", "off")], count)
    run = {"id": 1, "status": "running", "counts": {"pass": count, "queued": 1, "running": 0},
           "waiting": [{"reason": "waiting for a cuda worker", "since": "now"}] * count}
    return {"rules": rules_section(rules(count)), "warnings": rules_section(rules(count, "warning")),
            "power": power_section(power(count)),
            "carried": carried_line(CarriedSection(carried=count, base_run_id=3, rerun=count)),
            "status": with_rules(project, rules(count)).description, "patch": patch.description,
            "progress": title, "cli progress": progress_line(run), "cli waiting": "\n".join(waiting_lines(run))}


@pytest.mark.parametrize("what", sorted(texts(1)))
def test_a_count_of_one_reads_in_the_singular(what):
    text = texts(1)[what]
    assert not WRONG_ONE.search(text), text
    assert WRONG_ONE.search(re.sub(r"\b2\b", "1", texts(2)[what])), "the check would not see a plural after 1"


def test_the_singular_words_of_each_message():
    one, two = texts(1), texts(2)
    assert "of the checkout's 1 derivative rule." in one["rules"]
    assert "**1 of these rules is not fully exercised**; it fails this check:" in one["rules"]
    assert "**2 of these rules are not fully exercised**; they fail this check:" in two["rules"]
    assert "; it is a warning (gradci.toml" in one["warnings"] and "; they are warnings (" in two["warnings"]
    assert "1 rule this pull request did not change is not fully exercised either" in one["rules"]
    assert "Errors planted in 1 derivative rule by this run." in one["power"]
    assert "**1 planted perturbation is caught by no cell**" in one["power"]
    assert "**2 planted perturbations are caught by no cell**" in two["power"]
    assert one["carried"].startswith("**1** cell carried from run 3") and two["carried"].startswith("**2** cells")
    assert one["status"].startswith("1 rule not fully exercised;") and two["status"].startswith("2 rules not")
    assert one["patch"] == "100.00% of 1 changed cell passes" and two["patch"] == "100.00% of 2 changed cells pass"
    assert "… 1 failing cell so far" in one["progress"] and "… 2 failing cells so far" in two["progress"]
    assert "1 cell checked" in one["cli progress"] and "2 cells checked" in two["cli progress"]
    assert one["cli waiting"].startswith("1 job waiting") and two["cli waiting"].startswith("2 jobs waiting")
