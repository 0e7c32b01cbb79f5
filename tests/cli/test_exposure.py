"""Who ``gradci api`` and ``gradci up`` serve: no API token is said out loud (``--no-auth``) and then
only on loopback; ``gradci up`` on loopback shows its user everything, and elsewhere needs sign-in
configured or ``--public-read``."""
from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from gradci.cli.commands import app
from gradci.cli.serve import read_access_for_up
from gradci.services.settings import Settings, get_settings


@pytest.fixture
def workdir(clean_environment: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("GRADCI_WORKDIR", str(tmp_path / "work"))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def invoke(*args: str) -> tuple[int, str]:
    get_settings.cache_clear()
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.output


def test_gradci_api_refuses_to_start_without_a_token(workdir: Path) -> None:
    code, output = invoke("api", "--port", "1")
    assert code == 2 and "no API token" in output and "--no-auth" in output


def test_no_auth_serves_on_loopback_only(workdir: Path) -> None:
    code, output = invoke("api", "--no-auth", "--host", "0.0.0.0", "--port", "1")
    assert code == 2 and "only on a loopback address, not 0.0.0.0" in output


def test_gradci_up_elsewhere_than_loopback_needs_sign_in_or_public_read(workdir: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GRADCI_API_HOST", "0.0.0.0")
    code, output = invoke("up", "--port", "1")
    assert code == 2 and "--public-read" in output and "GRADCI_GITHUB_OAUTH_CLIENT_ID" in output
    assert not (workdir / "work" / "api-token").exists()  # refused before anything was made or started


@pytest.mark.parametrize(("fields", "public_read", "expected"), [
    ({"api_host": "127.0.0.1"}, False, "local"),           # one person's tool: its user sees everything
    ({"api_host": "::1"}, False, "local"),
    ({"api_host": "0.0.0.0"}, True, "open"),               # --public-read, said explicitly
    ({"api_host": "0.0.0.0", "github_oauth_client_id": "id", "github_oauth_client_secret": "s"}, False, "public"),
    ({"api_host": "0.0.0.0"}, False, None),                 # refused
    ({"api_host": "0.0.0.0", "read_access": "login"}, False, "login"),  # the operator's own setting is kept
])
def test_what_gradci_up_shows_to_whom(clean_environment: None, fields: dict, public_read: bool,
                                      expected: str | None) -> None:
    assert read_access_for_up(Settings(**fields), public_read)[0] == expected
