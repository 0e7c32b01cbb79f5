"""Untrusted text (scenario names, backends, devices, messages, paths) in what gradci writes to GitHub.

A pull request chooses its scenarios' names and messages, and an upload its backends: set as markdown
they could open a heading, a link, an image, an @-mention, an HTML comment that hides the rest of
the report, or split a table row. So every such string goes into a code span that no text can close
(delimited by more backticks than any run inside it): inside one, GitHub renders no markup, links
no mention or issue number, and ``<!--`` is text. What a code span cannot hold is made visible
first: line breaks (they would end a table row, and the text after them would be markdown) and
other control characters.
"""
from __future__ import annotations

import re

_LINE_BREAK = re.compile(r"\r\n|\r|\n")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")  # after line breaks; tabs included
_BACKTICKS = re.compile(r"`+")


def one_line(text: str) -> str:
    """``text`` on one line: a line break as ⏎, any other control character as U+FFFD."""
    return _CONTROL.sub("\ufffd", _LINE_BREAK.sub("⏎", text))


def code(text: str, *, in_table: bool = True) -> str:
    """``text`` as an inline code span that shows it exactly (on one line).

    ``in_table``: a GFM table splits its rows at every unescaped ``|``, code spans included, so pipes
    are escaped as ``\\|``, which the table turns back into ``|``; elsewhere a backslash in a code span
    would show.
    """
    text = one_line(text)
    if not text:
        return "—"
    fence = "`" * (max((len(run) for run in _BACKTICKS.findall(text)), default=0) + 1)
    # A span that starts or ends with a backtick needs a space before its fence, and CommonMark strips
    # one space from each end when both ends have one: padding both keeps the text as it was.
    padded = f" {text} " if text[0] in "` " or text[-1] in "` " else text
    if in_table:
        padded = padded.replace("|", "\\|")
    return f"{fence}{padded}{fence}"
