"""``gradci check --upload URL``: send the checked cells to a gradci server.

The cells go to ``POST URL/api/uploads`` with the commit they belong to.

The repository, commit, branch, pull request and base commit come from the CI's variables (GitHub
Actions: ``GITHUB_REPOSITORY``, ``GITHUB_SHA``, ``GITHUB_REF`` and the event file at
``GITHUB_EVENT_PATH``, whose pull request names its head and base commits); flags override each.
The credential is ``GRADCI_UPLOAD_TOKEN``, or else the workflow's OIDC id token, asked of the runner
(``ACTIONS_ID_TOKEN_REQUEST_URL`` and ``ACTIONS_ID_TOKEN_REQUEST_TOKEN``, with ``permissions:
id-token: write``) for the server's audience.

With rule coverage, each cell carries its record (and with ``--power`` its detection-power record) and
the body the checkout's rules, each method with its source read from the checkout (never from outside
it): the uploaded run shows its rules as a worker's does. A cell whose records would make it larger
than the server takes of one cell loses its covered lines first, then its power record, never the cell.
"""
from __future__ import annotations

import dataclasses
import json
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx

from gradci.cli.client import ClientError, GradciClient
from gradci.scenarios.contract.cell import Cell
from gradci.scenarios.contract.wording import count_of
from gradci.scenarios.rules.power import POWER_KEY
from gradci.scenarios.rules.records import RECORD_KEY
from gradci.services.db.record_schema import SOURCE_LIMIT
from gradci.services.uploads.stream import MAX_ITEM_BYTES

DEFAULT_SHARD = "default"
UPLOAD_TIMEOUT_S = 120.0
PULL_REF = re.compile(r"^refs/pull/(\d+)/")
CELL_BYTES = MAX_ITEM_BYTES - 4096  # what one cell's JSON may take, with room to spare


class UploadError(Exception):
    """The upload cannot be made or was refused: one line, exit 2."""


@dataclasses.dataclass(frozen=True)
class UploadOptions:
    """``--upload URL`` and the flags beside it (None: from the CI's variables or gradci.toml)."""

    url: str
    shard: str | None = None
    expect_shards: list[str] | None = None
    repository: str | None = None
    sha: str | None = None
    branch: str | None = None
    pr: int | None = None
    base_sha: str | None = None


def github_actions_commit(env: Mapping[str, str]) -> dict[str, Any]:
    """What GitHub Actions says about the commit checked.

    On a pull request: its head commit (not the merge commit GITHUB_SHA names there), its base commit,
    number and branch.
    """
    ref = env.get("GITHUB_REF") or ""
    fields: dict[str, Any] = {"repository": env.get("GITHUB_REPOSITORY"), "sha": env.get("GITHUB_SHA"),
                              "branch": ref.removeprefix("refs/heads/") if ref.startswith("refs/heads/") else None}
    pull = PULL_REF.match(ref)
    if pull:
        fields["pr"] = int(pull.group(1))
    event_path = env.get("GITHUB_EVENT_PATH")
    event = _json_file(Path(event_path)) if event_path else {}
    pull_request = event.get("pull_request") if isinstance(event.get("pull_request"), dict) else None
    if pull_request:
        head, base = pull_request.get("head") or {}, pull_request.get("base") or {}
        fields.update(pr=pull_request.get("number") or fields.get("pr"), sha=head.get("sha") or fields["sha"],
                      base_sha=base.get("sha"), branch=head.get("ref") or fields["branch"])
    return fields


def _json_file(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise UploadError(f"GITHUB_EVENT_PATH {path}: {exc}") from None
    return data if isinstance(data, dict) else {}


def commit_fields(options: UploadOptions, env: Mapping[str, str]) -> dict[str, Any]:
    """The upload's repository, sha, branch, pr and base_sha: the CI's, each overridden by its flag."""
    fields = github_actions_commit(env)
    for name in ("repository", "sha", "branch", "pr", "base_sha"):
        if getattr(options, name) is not None:
            fields[name] = getattr(options, name)
    missing = [name for name in ("repository", "sha") if not fields.get(name)]
    if missing:
        flags = " and ".join(f"--{name}" for name in missing)
        raise UploadError(f"--upload needs {flags} (outside GitHub Actions, where GITHUB_REPOSITORY and "
                          f"GITHUB_SHA say them)")
    return {name: value for name, value in fields.items() if value is not None}


def shards(options: UploadOptions, config: Mapping[str, Any]) -> tuple[str, list[str] | None]:
    """(this upload's shard, every shard the run waits for): the flags, else gradci.toml's [upload] shards."""
    expected = options.expect_shards
    if expected is None:
        table = config.get("upload")
        listed = table.get("shards") if isinstance(table, dict) else None
        if listed is not None and (not isinstance(listed, list) or not all(isinstance(s, str) for s in listed)):
            raise UploadError("gradci.toml: [upload] shards must be a list of shard names")
        expected = listed or None
    shard = options.shard or (DEFAULT_SHARD if not expected else None)
    if shard is None:
        raise UploadError(f"--shard must name this upload among the expected shards {', '.join(expected or [])}")
    return shard, expected


def credential(server: str, env: Mapping[str, str]) -> str:
    """GRADCI_UPLOAD_TOKEN, else an OIDC id token from the GitHub Actions runner for the server's audience."""
    if env.get("GRADCI_UPLOAD_TOKEN"):
        return env["GRADCI_UPLOAD_TOKEN"]
    url, request_token = env.get("ACTIONS_ID_TOKEN_REQUEST_URL"), env.get("ACTIONS_ID_TOKEN_REQUEST_TOKEN")
    if not url or not request_token:
        raise UploadError("no credential to upload with: set GRADCI_UPLOAD_TOKEN (gradci tokens create), or in "
                          "GitHub Actions give the job 'permissions: id-token: write'")
    audience = env.get("GRADCI_OIDC_AUDIENCE") or server.rstrip("/")
    try:
        response = httpx.get(f"{url}{'&' if '?' in url else '?'}audience={quote(audience, safe='')}",
                             headers={"Authorization": f"bearer {request_token}"}, timeout=30)
        response.raise_for_status()
        return str(response.json()["value"])
    except (httpx.HTTPError, ValueError, KeyError, TypeError) as exc:
        raise UploadError(f"the runner gave no id token: {exc}") from None


@dataclasses.dataclass(frozen=True)
class RuleUpload:
    """What rule coverage recorded, to send beside the cells: records by cell key, the rules, the root."""

    root: str
    rules: Sequence[Mapping[str, Any]]  # Rule.to_dict
    coverage: Mapping[tuple[str, str, str, str], Mapping[str, Any]]  # CellRules.to_dict per cell key
    power: Mapping[tuple[str, str, str, str], Mapping[str, Any]] = dataclasses.field(default_factory=dict)

    def cell(self, cell: Cell) -> dict[str, Any]:
        """The cell's JSON with its records, made to fit the server's bound on one cell."""
        out = cell.to_dict()
        if cell.key in self.coverage:
            out[RECORD_KEY] = dict(self.coverage[cell.key])
        if cell.key in self.power:
            out[POWER_KEY] = dict(self.power[cell.key])
        if len(json.dumps(out)) > CELL_BYTES and RECORD_KEY in out:
            out[RECORD_KEY] = {**out[RECORD_KEY], "lines": {}}
        if len(json.dumps(out)) > CELL_BYTES:
            out.pop(POWER_KEY, None)
        return out

    def rules_with_source(self) -> list[dict[str, Any]]:
        """The rules, each method with its lines of the checkout (as the service's dashboard shows them)."""
        root = Path(self.root).resolve()
        out = []
        for rule in self.rules:
            methods = [{**method, "source": method_source(root, method)} for method in rule.get("methods") or ()]
            out.append({**rule, "methods": methods})
        return out


def method_source(root: Path, method: Mapping[str, Any]) -> str:
    """The method's lines, read only from a file inside ``root`` (a name the repository's code gave)."""
    path = (root / str(method.get("file") or "")).resolve()
    if not path.is_relative_to(root) or not path.is_file():
        return ""
    try:
        lines = path.read_text(errors="replace").splitlines(keepends=True)
    except OSError:
        return ""
    first, last = int(method.get("first_line") or 1), max([int(n) for n in method.get("lines") or ()] or [1])
    return "".join(lines[first - 1:last])[:SOURCE_LIMIT]


def upload_body(cells: Sequence[Cell], catalog: Sequence[Mapping[str, Any]], commit: Mapping[str, Any],
                shard: str, expected: list[str] | None, config: Mapping[str, Any],
                rules: RuleUpload | None = None) -> dict[str, Any]:
    as_json = rules.cell if rules is not None else Cell.to_dict
    body: dict[str, Any] = {**commit, "shard": shard, "cells": [as_json(cell) for cell in cells],
                            "scenarios": [dict(entry) for entry in catalog]}
    if rules is not None and rules.rules:
        body["rules"] = rules.rules_with_source()
    if expected:
        body["expect_shards"] = expected
    if isinstance(config.get("report"), dict):
        body["report"] = config["report"]
    return body


def upload(options: UploadOptions, cells: Sequence[Cell], catalog: Sequence[Mapping[str, Any]],
           config: Mapping[str, Any], env: Mapping[str, str] | None = None, rules: RuleUpload | None = None) -> str:
    """Send the cells (with ``rules``' records); the line that says where they went. Raises ``UploadError``."""
    env = os.environ if env is None else env
    commit = commit_fields(options, env)
    shard, expected = shards(options, config)
    body = upload_body(cells, catalog, commit, shard, expected, config, rules)
    try:
        with GradciClient(options.url, credential(options.url, env), timeout_s=UPLOAD_TIMEOUT_S) as client:
            answer = client.upload(body)
    except ClientError as exc:
        raise UploadError(str(exc)) from None
    waiting = sorted(set(answer["expected"]) - set(answer["arrived"]))
    state = "its report is on its way" if answer["finishing"] else f"waiting for {', '.join(waiting)}"
    return (f"uploaded shard {shard!r} ({count_of(answer['cells'], 'cell')}) of "
            f"{commit['repository']}@{commit['sha'][:12]} to run {answer['run_id']}: {state} — {answer['url']}")
