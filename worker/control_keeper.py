"""Keeping a CPU worker's control node running beside its job pool, and stopping it with the worker.

The job node (``gradci worker --device cpu``) starts its control node (``gradci.worker.control_node``)
as a child process, starts it again when it dies (at once after a long life, after a growing pause
while it keeps dying), and stops it as it stops itself: SIGTERM when its own shutdown begins, so that
both stop together within the seconds a service manager allows, then SIGKILL to whatever is left
after the grace. The child stays in the job node's process group, so whatever stops the group (Ctrl-C
in a terminal, systemd's control-group kill, ``gradci up`` killing a worker's group) stops it too; if
the job node dies without stopping it, the kernel sends it SIGTERM (``control_node.die_with``).
"""
from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any

from celery import signals

from gradci.services.broker.queues import CONTROL_QUEUE

log = logging.getLogger(__name__)

CONTROL_NODE_MODULE = "gradci.worker.control_node"
RESTART_DELAYS_S = (1.0, 2.0, 5.0, 10.0, 30.0)
STABLE_AFTER_S = 60.0  # a node that ran this long before dying starts again without delay
# Below the 6 s `gradci up` and the tests give a worker: the node's cold shutdown takes about a second.
STOP_GRACE_S = 5.0


def control_node_name(worker_name: str) -> str:
    """The control node's Celery name beside the job node ``worker_name``: ``control-cpu-123@host``."""
    return f"{CONTROL_QUEUE}-{worker_name}"


def control_node_argv(worker_name: str, loglevel: str) -> list[str]:
    # -P: the folder the worker runs in is no import root (a folder named like ours must not shadow it).
    return [sys.executable, "-P", "-m", CONTROL_NODE_MODULE, "--parent", str(os.getpid()),
            "--name", control_node_name(worker_name), "--loglevel", loglevel]


class ControlKeeper:
    """Starts, restarts and stops one control node."""

    def __init__(self, argv: list[str]) -> None:
        self.argv = argv
        self._process: subprocess.Popen[bytes] | None = None
        self._stopping = threading.Event()
        # One thread starts every child and lives as long as one may run: PR_SET_PDEATHSIG fires when
        # the *thread* that started the child ends, not only the process.
        self._thread = threading.Thread(target=self._keep, name="gradci-control-keeper", daemon=True)

    def start(self) -> None:
        """Start the node, and from now on again whenever it dies; ``stop`` (or Celery's shutdown) ends it."""
        signals.worker_shutting_down.connect(self._on_shutting_down, weak=False)
        self._thread.start()

    def running(self) -> bool:
        process = self._process
        return process is not None and process.poll() is None

    def _keep(self) -> None:
        failures = 0
        while not self._stopping.is_set():
            started = time.monotonic()
            self._process = process = subprocess.Popen(self.argv)
            if self._stopping.is_set():  # stopped while it started: `terminate` may have missed it
                process.terminate()
            code = process.wait()
            if self._stopping.is_set():
                return
            failures = 0 if time.monotonic() - started > STABLE_AFTER_S else failures + 1
            delay = RESTART_DELAYS_S[min(failures, len(RESTART_DELAYS_S)) - 1] if failures else 0.0
            log.warning("the control node exited with code %s: starting it again in %g s", code, delay)
            self._stopping.wait(delay)

    def terminate(self) -> None:
        """Ask the node to stop (SIGTERM) and start it no more, without waiting: safe in a signal handler."""
        self._stopping.set()
        process = self._process
        if process is not None:
            process.send_signal(signal.SIGTERM)  # a node already gone is skipped

    def _on_shutting_down(self, **_: Any) -> None:
        # Sent by Celery's shutdown handler in the job node's main process, as its own shutdown begins.
        self.terminate()

    def stop(self, grace_s: float = STOP_GRACE_S) -> None:
        """Stop the node: SIGTERM, SIGKILL after ``grace_s``; returns once it is gone."""
        self.terminate()
        process = self._process
        if process is not None:
            try:
                process.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                log.warning("the control node did not stop within %g s: killed", grace_s)
                process.kill()
                process.wait()
        self._thread.join(timeout=grace_s)
