"""A small REST client of a gradci server.

It serves ``gradci submit``, ``gradci status``, ``gradci up --demo`` and ``gradci check --upload``.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
from rich.console import Console
from rich.table import Table

from gradci.scenarios.contract.cell import FAILING, STATUSES
from gradci.scenarios.contract.wording import count_of
from gradci.services.db.models import FINISHED_RUN_STATUSES
from gradci.services.settings import Settings

FINISHED = tuple(status.value for status in FINISHED_RUN_STATUSES)
TOKEN_FILE = "api-token"
EXIT_OK, EXIT_FAILED = 0, 1


class ClientError(RuntimeError):
    """The server refused a request or could not be reached; the message has its reason."""


def token_file(settings: Settings) -> Path:
    return Path(settings.workdir) / TOKEN_FILE


def find_token(settings: Settings) -> str | None:
    """GRADCI_API_TOKEN, else the token ``gradci up`` stored in the workdir."""
    if settings.api_token is not None:
        return settings.api_token.get_secret_value()
    path = token_file(settings)
    return path.read_text().strip() if path.is_file() else None


def default_server(settings: Settings) -> str:
    return settings.public_url or f"http://{settings.api_host}:{settings.api_port}"


class GradciClient:
    def __init__(self, server: str, token: str | None = None, timeout_s: float = 30.0) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.http = httpx.Client(base_url=server.rstrip("/"), headers=headers, timeout=timeout_s)

    def __enter__(self) -> GradciClient:
        return self

    def __exit__(self, *_: Any) -> None:
        self.http.close()

    def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            response = self.http.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise ClientError(f"cannot reach {self.http.base_url}: {exc}") from None
        if response.status_code >= 400:
            try:
                detail = response.json().get("detail")
            except ValueError:
                detail = response.text[:300]
            if isinstance(detail, list):  # a 422: each invalid field, where it is
                detail = "; ".join(f"{'.'.join(map(str, item.get('loc', [])))}: {item.get('msg')}"
                                   for item in detail[:10] if isinstance(item, dict))
            raise ClientError(f"{method} {path}: HTTP {response.status_code}: {detail}")
        return response.json()

    def submit(self, **fields: Any) -> dict[str, Any]:
        return self._call("POST", "/api/runs", json={k: v for k, v in fields.items() if v is not None})

    def upload(self, body: dict[str, Any]) -> dict[str, Any]:
        """POST /api/uploads: one shard of a commit's cells (``gradci check --upload``)."""
        return self._call("POST", "/api/uploads", json=body)

    def run(self, run_id: int) -> dict[str, Any]:
        return self._call("GET", f"/api/runs/{run_id}")

    def health(self) -> dict[str, Any]:
        return self._call("GET", "/api/health")

    def wait(self, run_id: int, *, on_update: Callable[[dict[str, Any]], None] | None = None,
             poll_s: float = 1.0, timeout_s: float | None = None) -> dict[str, Any]:
        """Poll until the run finishes; returns its last state."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            run = self.run(run_id)
            if on_update:
                on_update(run)
            if run["status"] in FINISHED:
                return run
            if deadline is not None and time.monotonic() > deadline:
                raise ClientError(f"run {run_id} is still {run['status']} after {timeout_s:g} s")
            time.sleep(poll_s)


def progress_line(run: dict[str, Any]) -> str:
    counts = run["counts"]
    checked = sum(counts.get(status, 0) for status in STATUSES)
    line = (f"run {run['id']} {run['status']}: {count_of(checked, 'cell')} checked, "
            f"jobs waiting {counts.get('queued', 0)}, running {counts.get('running', 0)}")
    reasons = list(dict.fromkeys(job["reason"] for job in run.get("waiting") or []))
    return line + "".join(f"; {reason}" for reason in reasons)


def waiting_lines(run: dict[str, Any]) -> list[str]:
    """One line per reason jobs wait for a device: "2 jobs waiting for a cuda worker; none online (since …)"."""
    by_reason: dict[str, list[dict[str, Any]]] = {}
    for job in run.get("waiting") or []:
        by_reason.setdefault(job["reason"], []).append(job)
    return [f"{count_of(len(jobs), 'job')} {reason} (since {min(j['since'] for j in jobs)})"
            for reason, jobs in by_reason.items()]


def exit_code(run: dict[str, Any]) -> int:
    """As ``gradci check``: 0 iff the run finished with no fail, error or xpass cell."""
    counts = run["counts"]
    ok = run["status"] == "passed" and not any(counts.get(status, 0) for status in FAILING)
    return EXIT_OK if ok else EXIT_FAILED


def coverage_text(coverage: float | None) -> str:
    """A coverage as the command line prints it."""
    return "—" if coverage is None else f"{coverage:.1f}%"


def print_summary(run: dict[str, Any], console: Console) -> None:
    table = Table(title=f"run {run['id']}: {run['status']}")
    for status in STATUSES:
        table.add_column(status, justify="right")
    table.add_column("coverage", justify="right")
    table.add_row(*(str(run["counts"].get(s, 0)) for s in STATUSES), coverage_text(run.get("coverage")))
    console.print(table)
    for line in waiting_lines(run):
        console.print(line, markup=False, highlight=False)
    if run.get("error_message"):
        console.print(f"error: {run['error_message']}", markup=False, highlight=False)
    console.print(f"{run['url']}", markup=False, highlight=False)
