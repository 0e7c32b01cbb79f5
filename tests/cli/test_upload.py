"""``gradci check --upload``'s client side: the commit from GitHub Actions' variables and event file,
flags over each, the shards from gradci.toml, and the credential (an upload token, or an id token
asked of the runner: a local issuer over loopback HTTP plays the runner)."""
from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import jwt
import pytest

from gradci.cli.upload import UploadError, UploadOptions, commit_fields, credential, shards
from tests.support.fake_oidc import REQUEST_TOKEN, FakeOidcIssuer

HEAD, BASE, MERGE = "1" * 40, "2" * 40, "3" * 40


def pull_request_env(tmp_path: Path) -> dict[str, str]:
    event = tmp_path / "event.json"
    event.write_text(json.dumps({"pull_request": {"number": 7, "head": {"sha": HEAD, "ref": "feature"},
                                                  "base": {"sha": BASE, "ref": "main"}}}))
    return {"GITHUB_REPOSITORY": "octo/uploads", "GITHUB_SHA": MERGE, "GITHUB_REF": "refs/pull/7/merge",
            "GITHUB_EVENT_PATH": str(event)}


def test_a_pull_request_is_its_head_commit_against_its_base(tmp_path: Path) -> None:
    assert commit_fields(UploadOptions(url="http://x"), pull_request_env(tmp_path)) == {
        "repository": "octo/uploads", "sha": HEAD, "branch": "feature", "pr": 7, "base_sha": BASE}


def test_a_push_is_its_commit_on_its_branch_and_flags_override_each(tmp_path: Path) -> None:
    push = {"GITHUB_REPOSITORY": "octo/uploads", "GITHUB_SHA": HEAD, "GITHUB_REF": "refs/heads/main"}
    assert commit_fields(UploadOptions(url="http://x"), push) == {"repository": "octo/uploads", "sha": HEAD,
                                                                  "branch": "main"}
    flags = UploadOptions(url="http://x", repository="octo/fork", sha=MERGE, branch="b", pr=3, base_sha=HEAD)
    assert commit_fields(flags, pull_request_env(tmp_path)) == {"repository": "octo/fork", "sha": MERGE, "branch": "b",
                                                                "pr": 3, "base_sha": HEAD}
    with pytest.raises(UploadError, match="--repository and --sha"):
        commit_fields(UploadOptions(url="http://x"), {})


def test_the_shards_come_from_the_flags_else_gradci_toml() -> None:
    config = {"upload": {"shards": ["cpu", "gpu"]}}
    assert shards(UploadOptions(url="u", shard="gpu"), config) == ("gpu", ["cpu", "gpu"])
    assert shards(UploadOptions(url="u", shard="a", expect_shards=["a", "b"]), config) == ("a", ["a", "b"])
    assert shards(UploadOptions(url="u"), {}) == ("default", None)
    with pytest.raises(UploadError, match="--shard"):
        shards(UploadOptions(url="u"), config)
    with pytest.raises(UploadError, match="list of shard names"):
        shards(UploadOptions(url="u", shard="a"), {"upload": {"shards": "a,b"}})


@pytest.fixture(scope="module")
def runner_issuer() -> Iterator[FakeOidcIssuer]:
    with FakeOidcIssuer("octo/uploads") as fake:
        yield fake


def test_without_an_upload_token_the_runner_is_asked_for_an_id_token(runner_issuer: FakeOidcIssuer) -> None:
    env = {"ACTIONS_ID_TOKEN_REQUEST_URL": runner_issuer.token_request_url,
           "ACTIONS_ID_TOKEN_REQUEST_TOKEN": REQUEST_TOKEN}
    token = credential("https://gradci.example/", env)
    assert jwt.decode(token, options={"verify_signature": False})["aud"] == "https://gradci.example"
    token = credential("https://gradci.example", {**env, "GRADCI_OIDC_AUDIENCE": "gradci"})
    assert jwt.decode(token, options={"verify_signature": False})["aud"] == "gradci"
    assert credential("https://gradci.example", {**env, "GRADCI_UPLOAD_TOKEN": "gradci_x"}) == "gradci_x"
    with pytest.raises(UploadError, match="id-token: write"):
        credential("https://gradci.example", {})
    with pytest.raises(UploadError, match="no id token"):
        credential("https://gradci.example", {**env, "ACTIONS_ID_TOKEN_REQUEST_TOKEN": "wrong"})


def test_the_action_runs_gradci_check_with_its_inputs_as_flags(tmp_path: Path) -> None:
    """action.yml's script, run by bash with a stand-in Python that prints its arguments: every input
    is used, each value arrives as one argument (never parsed as shell), and every flag is gradci check's."""
    import subprocess

    import yaml
    from typer.main import get_command

    from gradci.cli.commands import app

    text = (Path(__file__).resolve().parents[2] / "action.yml").read_text()
    action = yaml.safe_load(text)
    assert set(re.findall(r"inputs\.([a-z-]+)", text)) == set(action["inputs"])
    step = action["runs"]["steps"][-1]
    printer = tmp_path / "python"
    printer.write_text("#!/bin/sh\nfor arg in \"$@\"; do printf '%s\\n' \"$arg\"; done\n")
    printer.chmod(0o755)
    env = {"PATH": "/usr/bin:/bin", "PYTHON": str(printer), "GRADCI_SERVER": "https://gradci.example",
           "SHARD": "gpu", "EXPECT_SHARDS": "cpu,gpu", "BACKENDS": "torch-rev", "DEVICES": "", "DTYPES": "",
           "SCENARIOS": "nn/*; touch pwned", "EXTRA_ARGS": "-j 2"}
    done = subprocess.run(["bash", "-eo", "pipefail", "-c", step["run"]], env=env, cwd=tmp_path, capture_output=True,
                          text=True, check=True)
    argv = done.stdout.splitlines()
    assert argv == ["-P", "-m", "gradci", "check", "--repo", ".", "--upload", "https://gradci.example", "--shard", "gpu",
                    "--expect-shards", "cpu,gpu", "--backends", "torch-rev", "-k", "nn/*; touch pwned", "-j", "2"]
    assert not (tmp_path / "pwned").exists()
    known = {option for param in get_command(app).commands["check"].params for option in param.opts}  # type: ignore[attr-defined]
    assert {arg for arg in argv[3:] if arg.startswith("-")} <= known
