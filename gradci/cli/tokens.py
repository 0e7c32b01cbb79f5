"""``gradci tokens``: the upload tokens and read tokens of the server whose settings this process has.

Read tokens are shown with ``--read``. The server is the database of ``gradci up`` or ``gradci api``
run in the same folder, or GRADCI_DATABASE_URL.
"""
from __future__ import annotations

from datetime import datetime

from rich.console import Console
from rich.table import Table

from gradci.services.access.read_tokens import create_read_token, list_read_tokens, revoke_read_token
from gradci.services.db.migrate import upgrade
from gradci.services.db.models import ReadToken, UploadToken
from gradci.services.db.session import session_scope
from gradci.services.settings import Settings, get_settings
from gradci.services.uploads.tokens import create_token, list_tokens, revoke_token

EXIT_OK, EXIT_USAGE = 0, 2


def _database() -> str:
    settings: Settings = get_settings()
    settings.ensure_local_directories()
    upgrade(settings.database_url)  # as gradci up does: a fresh folder gets its tables
    return settings.database_url


def _when(moment: datetime | None) -> str:
    return moment.strftime("%Y-%m-%d %H:%M UTC") if moment else "—"


def _error(message: str) -> int:
    Console(stderr=True, soft_wrap=True).print(f"error: {message}", markup=False, highlight=False)
    return EXIT_USAGE


def _repositories(row: ReadToken | UploadToken) -> str:
    return ", ".join(row.repositories) if isinstance(row, ReadToken) else row.full_name


def create(repositories: list[str], read: bool = False) -> int:
    """Make a token and print it once, alone on the last line: only its hash is kept."""
    try:
        with session_scope(_database()) as session:
            row, token = create_read_token(session, repositories) if read else \
                create_token(session, repositories[0])
            token_id, names = row.id, _repositories(row)
    except ValueError as exc:
        return _error(str(exc))
    use = ("send it as 'Authorization: Bearer <token>', or as ?token= in a badge's URL" if read else
           "give it to the CI as the secret GRADCI_UPLOAD_TOKEN")
    print(f"{'read' if read else 'upload'} token {token_id} for {names}: shown this once (only its hash is "
          f"stored); {use}:")
    print(token, flush=True)
    return EXIT_OK


def show(read: bool = False) -> int:
    with session_scope(_database(), readonly=True) as session:
        rows = list_read_tokens(session) if read else list_tokens(session)
    last_used = [] if read else ["last used"]  # a read token's uses are not counted
    table = Table(title="read tokens" if read else "upload tokens")
    for column in ("id", "repositories" if read else "repository", "token", "created", *last_used, "revoked"):
        table.add_column(column)
    for row in rows:
        used = [_when(row.last_used_at)] if isinstance(row, UploadToken) else []
        table.add_row(str(row.id), _repositories(row), f"{row.prefix}…", _when(row.created_at), *used,
                      _when(row.revoked_at))
    Console().print(table)
    return EXIT_OK


def revoke(token_id: int, read: bool = False) -> int:
    kind = "read" if read else "upload"
    with session_scope(_database()) as session:
        row = revoke_read_token(session, token_id) if read else revoke_token(session, token_id)
        names = _repositories(row) if row is not None else None
    if names is None:
        return _error(f"no {kind} token {token_id} (gradci tokens list{' --read' if read else ''} shows them)")
    refused = "reads with it are refused (401)" if read else "uploads with it are refused (401)"
    print(f"{kind} token {token_id} for {names} revoked: {refused}")
    return EXIT_OK
