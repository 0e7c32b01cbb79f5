"""The rules table of ``gradci check``: each rule's name, kind and file, then a row per method."""
from __future__ import annotations

import io

from gradci.cli.check import plain_console
from gradci.cli.rule_coverage import render_rules
from gradci.scenarios.rules.discovery import CUSTOM_LINEAR_SOLVE, CUSTOM_VJP, Rule, RuleMethod
from gradci.scenarios.rules.summary import WARNING, summarize


def first_column(printed: str) -> list[str]:
    """The table's first column, a line per table line (rich draws cells between "│")."""
    return [line.split("│")[1].strip() for line in printed.splitlines() if line.count("│") > 2]


def test_each_rule_shows_its_kind_between_its_name_and_its_file():
    rules = [Rule(name="softsign", file="ops/soft.py", kind=CUSTOM_VJP,
                  methods=(RuleMethod("fwd", "ops/soft.py", 3, (4, 5)), RuleMethod("bwd", "ops/soft.py", 7, (8, 9)))),
             Rule(name="solve", file="ops/linear.py", kind=CUSTOM_LINEAR_SOLVE,
                  methods=(RuleMethod("transpose_solve", "ops/linear.py", 12, (13, 14)),))]
    out = io.StringIO()
    render_rules(summarize(rules, []), plain_console(file=out, width=200), WARNING)
    column = [cell for cell in first_column(out.getvalue()) if cell not in ("", "rule")]
    # A custom_vjp's fwd and bwd and a solve handed to a lax call read alike by their method names.
    assert column == ["softsign", CUSTOM_VJP, "ops/soft.py", "solve", CUSTOM_LINEAR_SOLVE, "ops/linear.py"]
