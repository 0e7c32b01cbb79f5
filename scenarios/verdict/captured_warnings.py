"""Python warnings raised while a cell computes, kept with the cell instead of printed.

A framework may warn on every call (torch's UserWarnings, jax's dtype notes): printed, a few hundred
cells flood the terminal or the worker's log and hide what matters. They are recorded instead,
deduplicated and capped (the first ``MAX_WARNINGS`` distinct ones, ``MAX_WARNING_CHARS`` each), into
``Cell.warnings``.
"""
from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterable, Iterator

MAX_WARNINGS = 5
MAX_WARNING_CHARS = 300


class CapturedWarnings:
    """The lines of the warnings caught so far, each once."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def add(self, lines: Iterable[str]) -> None:
        for line in lines:
            if line and line not in self.lines and len(self.lines) < MAX_WARNINGS:
                self.lines.append(line)

    def text(self) -> str:
        return "\n".join(self.lines)


def warning_line(message: warnings.WarningMessage) -> str:
    first = (str(message.message).strip().splitlines() or [""])[0]
    return f"{message.category.__name__}: {first}"[:MAX_WARNING_CHARS]


@contextlib.contextmanager
def captured_warnings() -> Iterator[CapturedWarnings]:
    """Record every warning raised inside (even one already shown once elsewhere) without printing it."""
    captured = CapturedWarnings()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            yield captured
        finally:
            captured.add(warning_line(message) for message in caught)


def merged(text: str, lines: Iterable[str]) -> str:
    """``text`` (a cell's warnings) with ``lines`` added, deduplicated and capped again."""
    captured = CapturedWarnings()
    captured.add(text.splitlines())
    captured.add(lines)
    return captured.text()
