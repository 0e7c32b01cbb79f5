"""Keep a few child processes alive: restart one that dies, stop them all together.

Each child leads its own process group, so stopping it also stops what it started (a worker's
pool processes; runners die with the pool process that started them), and a Ctrl-C in the
terminal reaches only the supervisor, which then stops the children in order. A child whose
supervisor dies without stopping it (SIGKILL) gets SIGTERM from the kernel: nothing is left behind.
"""
from __future__ import annotations

import dataclasses
import logging
import os
import signal
import subprocess
import time
from pathlib import Path

from gradci.services.secrecy import libc

log = logging.getLogger(__name__)

# A worker stopped with SIGTERM hands its running jobs back to the broker and exits in a few
# seconds; whatever still runs after this grace is killed, well within the 10 s a service manager
# (or a person at Ctrl-C) expects.
STOP_GRACE_S = 6.0
_PR_SET_PDEATHSIG = 1
RESTART_BACKOFF_S = (1.0, 2.0, 5.0, 10.0, 30.0)
STABLE_AFTER_S = 60.0  # a child that ran this long before dying restarts without delay again


@dataclasses.dataclass
class Child:
    name: str
    argv: list[str]
    env: dict[str, str]
    log_path: Path | None = None  # stdout and stderr appended here; None: the supervisor's own
    process: subprocess.Popen[bytes] | None = None
    restarts: int = 0
    started_at: float = 0.0
    next_start: float = 0.0
    failures_in_a_row: int = 0


class Supervisor:
    def __init__(self) -> None:
        self.children: list[Child] = []

    def add(self, name: str, argv: list[str], env: dict[str, str], log_path: Path | None = None) -> Child:
        child = Child(name, argv, env, log_path)
        self.children.append(child)
        self._start(child)
        return child

    def _start(self, child: Child) -> None:
        output = None
        if child.log_path is not None:
            child.log_path.parent.mkdir(parents=True, exist_ok=True)
            output = open(child.log_path, "ab")
        try:
            child.process = subprocess.Popen(child.argv, env=child.env, start_new_session=True, stdout=output,
                                             stderr=subprocess.STDOUT if output else None,
                                             preexec_fn=_terminate_with_parent)
        finally:
            if output is not None:
                output.close()  # the child holds its own copy
        child.started_at = time.monotonic()
        log.info("started %s (pid %s)", child.name, child.process.pid)

    def poll(self) -> None:
        """Restart the children that died, with a growing delay for one that keeps dying."""
        now = time.monotonic()
        for child in self.children:
            assert child.process is not None
            if child.process.poll() is None:
                continue
            if child.next_start == 0.0:
                ran_for = now - child.started_at
                child.failures_in_a_row = 0 if ran_for > STABLE_AFTER_S else child.failures_in_a_row + 1
                delay = RESTART_BACKOFF_S[min(child.failures_in_a_row, len(RESTART_BACKOFF_S) - 1)]
                child.next_start = now + (0.0 if child.failures_in_a_row == 0 else delay)
                where = f"; see {child.log_path}" if child.log_path else ""
                print(f"gradci up: {child.name} exited with code {child.process.returncode}{where}; restarting",
                      flush=True)
            if now >= child.next_start:
                child.next_start = 0.0
                child.restarts += 1
                self._start(child)

    def serve_forever(self, interval_s: float = 0.5) -> None:
        while True:
            self.poll()
            time.sleep(interval_s)

    def stop(self) -> None:
        """Stop every child, and kill what is left of it after the grace.

        SIGTERM every child (a Celery worker then stops its pool and finishes its current task),
        SIGKILL whatever is left of its process group after the grace.
        """
        for child in self.children:
            if child.process is not None and child.process.poll() is None:
                child.process.terminate()
        deadline = time.monotonic() + STOP_GRACE_S
        for child in self.children:
            if child.process is None:
                continue
            try:
                child.process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
            _signal_group(child, signal.SIGKILL)
            child.process.wait()


def _signal_group(child: Child, signum: int) -> None:
    if child.process is None:
        return
    try:
        os.killpg(child.process.pid, signum)
    except (ProcessLookupError, PermissionError):
        pass


def _terminate_with_parent() -> None:
    """In the child, before exec: SIGTERM when the supervisor dies (the setting survives exec)."""
    libc().prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
