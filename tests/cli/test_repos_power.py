"""``gradci repos power on|off``: a repository's detection-power option, set all or none, listed."""
from __future__ import annotations

import pytest
from typer.testing import CliRunner

from gradci.cli.commands import app
from gradci.services.db.repository_options import power_repositories
from gradci.services.db.session import session_scope


@pytest.fixture
def cli(clean_environment, sqlite_url: str, tmp_path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("GRADCI_DATABASE_URL", sqlite_url)
    monkeypatch.setenv("GRADCI_WORKDIR", str(tmp_path / "work"))
    runner = CliRunner()
    return lambda *args: runner.invoke(app, ["repos", *args])


def powered(url: str) -> frozenset[str]:
    with session_scope(url, readonly=True) as session:
        return power_repositories(session)


def test_power_is_turned_on_and_off_per_repository_and_listed(cli, sqlite_url: str):
    on = cli("power", "on", "Octo/Ops", "octo/more")
    assert on.exit_code == 0 and "octo/ops: detection power on" in on.stdout.lower()
    assert powered(sqlite_url) == {"octo/ops", "octo/more"}
    assert "already on" in cli("power", "on", "octo/OPS").stdout
    listed = cli("list")
    assert listed.exit_code == 0 and "octo/ops" in listed.stdout and "not registered" in listed.stdout
    assert cli("power", "off", "octo/more").exit_code == 0
    assert powered(sqlite_url) == {"octo/ops"}


@pytest.mark.parametrize(("args", "says"), [(("power", "yes", "octo/ops"), "'on' or 'off'"),
                                            (("power", "on", "octo/ops", "not a name"), "owner/name")])
def test_a_wrong_word_or_name_changes_nothing(cli, sqlite_url: str, args: tuple[str, ...], says: str):
    done = cli(*args)
    assert done.exit_code == 2 and says in done.output
    assert powered(sqlite_url) == frozenset()
