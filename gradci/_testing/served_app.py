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
def served_app(database_url: str, logs: Path, **settings: str) -> Iterator[ServedApp]:
    """``gradci api`` on ``database_url`` (no worker), stopped on exit.

    ``gradci api`` runs uvicorn in its own process, so the process measured is the one that serves.
    """
    port = free_port()
    logs.mkdir(parents=True, exist_ok=True)
    # What is measured is reading: no token (--no-auth, on loopback), read as gradci up's local user.
    env = service_env(database_url=database_url, workdir=str(logs / "work"), **{"read_access": "local", **settings})
    process = start_api(env, logs, port, "--no-auth")
    app = ServedApp(url=f"http://127.0.0.1:{port}", process=process)
    try:
        wait_for(lambda: api_answers(app.url), "the API to answer", timeout_s=60)
        yield app
    finally:
        stop(process)
