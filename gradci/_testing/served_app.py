"""The whole HTTP service in one real ``gradci api`` process, and the memory one request costs it.

The process serves both the API and the dashboard. The memory is Linux's peak resident set
(VmHWM), reset before the request through ``/proc/<pid>/clear_refs`` so that each request is
measured on its own.
"""
from __future__ import annotations

import dataclasses
import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

from gradci._testing.processes import free_port, service_env, stop, wait_for
from gradci._testing.service import api_answers, start_api

T = TypeVar("T")
_RESET_PEAK_RSS = "5"  # proc(5): writing 5 to clear_refs resets the peak resident set size


@dataclasses.dataclass
class ServedApp:
    url: str
    process: subprocess.Popen[bytes]

    def _status_kib(self, field: str) -> int:
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith(f"{field}:"):
                return int(line.split()[1])
        raise LookupError(field)

    def rss_mib(self) -> float:
        return self._status_kib("VmRSS") / 1024

    def peak_rss_during(self, request: Callable[[], T]) -> tuple[T, float]:
        """``request()``'s answer and the server's peak resident memory (MiB) while it ran."""
        Path(f"/proc/{self.process.pid}/clear_refs").write_text(_RESET_PEAK_RSS)
        answer = request()
        return answer, self._status_kib("VmHWM") / 1024


@contextmanager
def serving_api(env: dict[str, str], logs: Path, *options: str, timeout_s: float = 60) -> Iterator[ServedApp]:
    """``gradci api`` with the environment ``env`` on a free loopback port, once it answers; stopped on exit.

    Its output goes to ``logs/api.log``, whose end a failure to come up shows.
    """
    port = free_port()
    process = start_api(env, logs, port, *options)
    app = ServedApp(url=f"http://127.0.0.1:{port}", process=process)
    try:
        try:
            wait_for(lambda: process.poll() is not None or api_answers(app.url), "gradci api to answer",
                     timeout_s=timeout_s, interval_s=0.2)
        except AssertionError as exc:
            raise AssertionError(f"gradci api did not come up:\n{_log_end(logs)}") from exc
        assert process.poll() is None, f"gradci api exited:\n{_log_end(logs)}"
        yield app
    finally:
        stop(process)


def _log_end(logs: Path) -> str:
    log = logs / "api.log"
    return log.read_text()[-3000:] if log.exists() else "(no log)"


@contextmanager
def served_app(database_url: str, logs: Path, **settings: str) -> Iterator[ServedApp]:
    """``gradci api`` on ``database_url`` (no worker), stopped on exit.

    ``gradci api`` runs uvicorn in its own process, so the process measured is the one that serves.
    """
    logs.mkdir(parents=True, exist_ok=True)
    # What is measured is reading: no token (--no-auth, on loopback), read as gradci up's local user.
    env = service_env(database_url=database_url, workdir=str(logs / "work"), **{"read_access": "local", **settings})
    with serving_api(env, logs, "--no-auth") as app:
        yield app
