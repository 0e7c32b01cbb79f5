"""``gradci repos``: the repositories registered with the server whose settings this process has.

They are those whose App installation may run pull requests and whose CI may upload with an OIDC id
token. ``gradci repos power on|off`` sets a repository's option to measure detection power on its
default branch (``gradci.services.db.repository_options``), registered or not; the API's
``PATCH /api/repos/{owner}/{repo}/options`` sets the same with the API token. These commands write the
database directly, as the operator's other commands (``gradci tokens``) do.
"""
from __future__ import annotations

from collections.abc import Callable

from rich.console import Console
from rich.table import Table
from sqlalchemy.orm import Session

from gradci.cli.tokens import EXIT_OK, _database, _error, _when
from gradci.services.db.registry import register, registered, unregister
from gradci.services.db.repository_options import power_repositories, set_power
from gradci.services.db.session import session_scope
from gradci.services.settings import get_settings


def _in_one_transaction(change: Callable[[Session, str], bool], full_names: list[str]) -> dict[str, bool]:
    """``change`` applied to each name, all or none (a malformed name raises ValueError before any commit)."""
    with session_scope(_database()) as session:
        return {name: change(session, name) for name in full_names}


def add(full_names: list[str]) -> int:
    try:
        added = _in_one_transaction(register, full_names)
    except ValueError as exc:
        return _error(str(exc))
    for name, new in added.items():
        print(f"{name}: {'registered' if new else 'already registered'}: its App installation's pull requests "
              "run, and its CI may upload with an OIDC id token")
    return EXIT_OK


def remove(full_names: list[str]) -> int:
    try:
        removed = _in_one_transaction(unregister, full_names)
    except ValueError as exc:
        return _error(str(exc))
    for name in (name for name, gone in removed.items() if gone):
        print(f"{name}: no longer registered: its App's pull requests get a refusal, its id tokens a 403")
    missing = [name for name, gone in removed.items() if not gone]
    if missing:
        return _error(f"not registered: {', '.join(missing)} (gradci repos list shows what is)")
    return EXIT_OK


def power(state: str, full_names: list[str]) -> int:
    """``gradci repos power on|off OWNER/NAME...``."""
    if state not in ("on", "off"):
        return _error(f"power is 'on' or 'off', not {state!r}")
    try:
        changed = _in_one_transaction(lambda session, name: set_power(session, name, state == "on"), full_names)
    except ValueError as exc:
        return _error(str(exc))
    for name, new in changed.items():
        if state == "on":
            print(f"{name}: detection power {'on' if new else 'already on'}: each push to its default branch "
                  "re-runs the cells that reach a rule with errors planted in it (pull requests never do)")
        else:
            print(f"{name}: detection power {'off' if new else 'already off'}")
    return EXIT_OK


def show() -> int:
    with session_scope(_database(), readonly=True) as session:
        rows = [(row.full_name, _when(row.added_at)) for row in registered(session)]
        powered = power_repositories(session)
    table = Table(title="registered repositories")
    for column in ("repository", "registered", "detection power"):
        table.add_column(column)
    for name, when in rows:
        table.add_row(name, when, "on" if name in powered else "off")
    for pattern in get_settings().allowed_repos:  # the operator's own list registers as well
        table.add_row(pattern, "GRADCI_ALLOWED_REPOS", "")
    for name in sorted(powered - {name for name, _ in rows}):  # let in otherwise (a webhook secret, a pattern)
        table.add_row(name, "not registered", "on")
    Console().print(table)
    return EXIT_OK
