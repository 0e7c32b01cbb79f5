"""``gradci submit`` and ``gradci status``: a gradci server's runs from the command line."""
from __future__ import annotations

import os
from typing import Any

from rich.console import Console

from gradci.cli.client import (
    ClientError,
    GradciClient,
    default_server,
    exit_code,
    find_token,
    print_summary,
    progress_line,
)
from gradci.scenarios.contract.matrix import Matrix
from gradci.services.settings import get_settings

EXIT_USAGE = 2


def _repo_for_server(repo: str | None) -> str | None:
    """A local path means the same folder on the server's machine: send it absolute."""
    if repo is None or "://" in repo or "@" in repo or repo.count("/") == 1 and not os.path.exists(repo):
        return repo  # a URL, scp-style git address, or GitHub owner/name
    return os.path.abspath(repo)


def _client(server: str | None) -> GradciClient:
    settings = get_settings()
    return GradciClient(server or default_server(settings), find_token(settings))


def submit(*, server: str | None, repo: str | None, sha: str | None, ref: str | None, matrix: Matrix,
           wait: bool, repeats: int | None = None, timings: bool | None = None) -> int:
    console = Console(stderr=True)
    fields: dict[str, Any] = {"repo": _repo_for_server(repo), "sha": sha, "ref": ref, "repeats": repeats,
                              "timings": timings, **matrix.to_mapping()}
    try:
        with _client(server) as client:
            created = client.submit(**fields)
            print(f"run {created['id']} {created['status']}: {created['url']}", flush=True)
            if not wait:
                return 0
            with console.status("waiting") as status:
                run = client.wait(created["id"], on_update=lambda r: status.update(progress_line(r)))
    except ClientError as exc:
        console.print(f"error: {exc}", markup=False, highlight=False)
        return EXIT_USAGE
    print_summary(run, Console())
    return exit_code(run)


def status(run_id: int, *, server: str | None) -> int:
    try:
        with _client(server) as client:
            run = client.run(run_id)
    except ClientError as exc:
        Console(stderr=True).print(f"error: {exc}", markup=False, highlight=False)
        return EXIT_USAGE
    print_summary(run, Console())
    return 0
