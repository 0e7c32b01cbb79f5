"""``gradci tokens``: the upload tokens of the server whose settings this process has (the database
of ``gradci up`` or ``gradci api`` run in the same folder, or GRADCI_DATABASE_URL)."""
from __future__ import annotations

from datetime import datetime

from rich.console import Console
from rich.table import Table

from gradci.services.db.migrate import upgrade
from gradci.services.db.session import session_scope
from gradci.services.settings import Settings, get_settings
from gradci.services.uploads.tokens import create_token, list_tokens, revoke_token

EXIT_OK, EXIT_USAGE = 0, 2


def _database() -> str:
    settings: Settings = get_settings()
    settings.ensure_local_directories()
    upgrade(settings.database_url)  # as gradci up does: a fresh folder gets its tables
    return settings.database_url


def create(full_name: str) -> int:
    """Make a token and print it once, alone on the last line: only its hash is kept."""
    console = Console(stderr=True, soft_wrap=True)
    try:
        with session_scope(_database()) as session:
            row, token = create_token(session, full_name)
            token_id = row.id
    except ValueError as exc:
        console.print(f"error: {exc}", markup=False, highlight=False)
        return EXIT_USAGE
    print(f"upload token {token_id} for {full_name}: shown this once (only its hash is stored); give it to "
          f"the CI as the secret GRADCI_UPLOAD_TOKEN:")
    print(token, flush=True)
    return EXIT_OK


def _when(moment: datetime | None) -> str:
    return moment.strftime("%Y-%m-%d %H:%M UTC") if moment else "—"


def show() -> int:
    with session_scope(_database(), readonly=True) as session:
        rows = list_tokens(session)
    table = Table(title="upload tokens")
    for column in ("id", "repository", "token", "created", "last used", "revoked"):
        table.add_column(column)
    for row in rows:
        table.add_row(str(row.id), row.full_name, f"{row.prefix}…", _when(row.created_at), _when(row.last_used_at),
                      _when(row.revoked_at))
    Console().print(table)
    return EXIT_OK


def revoke(token_id: int) -> int:
    with session_scope(_database()) as session:
        row = revoke_token(session, token_id)
        found = row is not None and (row.full_name, row.revoked_at)
    if not found:
        Console(stderr=True).print(f"error: no upload token {token_id} (gradci tokens list shows them)",
                                   markup=False, highlight=False)
        return EXIT_USAGE
    print(f"upload token {token_id} for {found[0]} revoked: uploads with it are refused (401)")
    return EXIT_OK
