"""What a repository's code names (rules, files) reaches the terminal and report files as it is.

The sandboxed runner runs the repository's code, so the rule names and file names it answers with
are the repository's words: "[bold]" or "[link=…]" in them is printed, not obeyed (a name "[/]" used
to crash the check), and a --cov-report never reads a file outside the checkout.
"""
from __future__ import annotations

import io
from pathlib import Path

from gradci.cli.check import plain_console
from gradci.cli.rule_coverage import render_rules
from gradci.scenarios.rules.discovery import TORCH_FUNCTION, Rule, RuleMethod
from gradci.scenarios.rules.reports import write_report
from gradci.scenarios.rules.summary import FAILURE, summarize

HOSTILE = "[/][bold red]INJECTED[/bold red] [link=https://evil.example]click[/link]"


def test_rule_and_file_names_are_printed_as_they_are():
    file = f"{HOSTILE}.py"
    rule = Rule(name=HOSTILE, file=file, kind=TORCH_FUNCTION, methods=(RuleMethod("backward", file, 3, (4, 5)),))
    out = io.StringIO()
    render_rules(summarize([rule], []), plain_console(file=out, width=400), FAILURE)
    printed = out.getvalue().replace("\n", "")  # the table folds long cells
    assert "not exercised by any scenario" in printed
    assert "[/][bold red]INJECTED[/bold red]" in printed and "[link=https://evil.example]" in printed


def test_a_coverage_report_reads_no_file_outside_the_checkout(tmp_path: Path):
    root, outside = tmp_path / "checkout", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (root / "ops.py").write_text("x = 1\ny = 2\n")
    (outside / "private_settings.py").write_text("def rotate_aws_key_for_customer_acme():\n    pass\n")
    (root / "link.py").symlink_to(outside / "private_settings.py")
    lines = {"ops.py": [1, 2], "../outside/private_settings.py": [1, 2], str(outside / "private_settings.py"): [1],
             "link.py": [1]}
    report = tmp_path / "r.lcov"
    write_report(report, root, lines, rule_files=["../outside/private_settings.py"])
    written = report.read_text()
    assert "SF:ops.py" in written
    assert "private_settings" not in written and "link.py" not in written
