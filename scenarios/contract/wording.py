"""Counts in messages: "1 cell", "3 cells", "the 1 cell that reaches it passes".

Every message that puts a number before a noun (the reports, the statuses, the command line) says it
through these two, so that a count of one reads right wherever it appears.
"""
from __future__ import annotations


def plural(count: int, singular: str, many: str | None = None) -> str:
    """``singular`` for a count of one, else ``many`` (``singular`` + "s" where not given).

    Verbs agree the same way: ``plural(n, "passes", "pass")``.
    """
    if count == 1:
        return singular
    return many if many is not None else singular + "s"


def count_of(count: int, singular: str, many: str | None = None) -> str:
    """``count`` and its noun in the right number: "1 cell", "0 cells", "2 rules that reach it"."""
    return f"{count} {plural(count, singular, many)}"
