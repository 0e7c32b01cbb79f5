"""``gradci repos``: the repositories registered with the server whose settings this process has.

They are those whose App installation may run pull requests and whose CI may upload with an OIDC id
token.
"""
from __future__ import annotations

from rich.console import Console
from rich.table import Table

from gradci.cli.tokens import EXIT_OK, _database, _error, _when
from gradci.services.db.registry import register, registered, unregister
from gradci.services.db.session import session_scope
from gradci.services.settings import get_settings


def add(full_names: list[str]) -> int:
    try:
        with session_scope(_database()) as session:
            added = {name: register(session, name) for name in full_names}
    except ValueError as exc:
        return _error(str(exc))
    for name, new in added.items():
        print(f"{name}: {'registered' if new else 'already registered'}: its App installation's pull requests "
              "run, and its CI may upload with an OIDC id token")
    return EXIT_OK


def remove(full_names: list[str]) -> int:
    try:
        with session_scope(_database()) as session:
            removed = {name: unregister(session, name) for name in full_names}
    except ValueError as exc:
        return _error(str(exc))
    for name in (name for name, gone in removed.items() if gone):
        print(f"{name}: no longer registered: its App's pull requests get a refusal, its id tokens a 403")
    missing = [name for name, gone in removed.items() if not gone]
    if missing:
        return _error(f"not registered: {', '.join(missing)} (gradci repos list shows what is)")
    return EXIT_OK


def show() -> int:
    with session_scope(_database(), readonly=True) as session:
        rows = [(row.full_name, _when(row.added_at)) for row in registered(session)]
    table = Table(title="registered repositories")
    for column in ("repository", "registered"):
        table.add_column(column)
    for name, when in rows:
        table.add_row(name, when)
    for pattern in get_settings().allowed_repos:  # the operator's own list registers as well
        table.add_row(pattern, "GRADCI_ALLOWED_REPOS")
    Console().print(table)
    return EXIT_OK
