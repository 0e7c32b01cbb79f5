"""Child processes of a test or a benchmark: their environment, start, stop and process trees."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

RUN_TIMEOUT_S = 120


def wait_for(predicate: Callable[[], Any], what: str, timeout_s: float = RUN_TIMEOUT_S, interval_s: float = 0.3) -> Any:
    """``predicate()``'s first truthy value; AssertionError naming ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(interval_s)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def service_env(**gradci: str) -> dict[str, str]:
    """This process's environment with gradci's variables replaced by the keywords.

    Any GRADCI_* variable is removed, then ``GRADCI_<KEY>=value`` is added for each keyword. Nothing is
    added to PYTHONPATH: the children import the installed ``gradci``, as a deployment does.
    """
    env = {key: value for key, value in os.environ.items() if not key.startswith("GRADCI_")}
    env.update({f"GRADCI_{key.upper()}": value for key, value in gradci.items()})
    return env


def spawn(argv: list[str], env: dict[str, str], log: Path, cwd: Path | None = None,
          ignoring: tuple[signal.Signals, ...] = ()) -> subprocess.Popen[bytes]:
    """Start ``argv`` in a session of its own, its output appended to ``log``.

    The session of its own lets ``stop`` reach its whole tree.
    ``cwd`` defaults to the log's folder: never a folder whose own packages could shadow gradci's.
    ``ignoring``: signals it starts with ignored, as a shell's background job starts with SIGINT.
    """
    def ignore() -> None:
        for signum in ignoring:
            signal.signal(signum, signal.SIG_IGN)

    with open(log, "ab") as output:
        return subprocess.Popen(argv, env=env, cwd=cwd or log.parent, stdout=output, stderr=subprocess.STDOUT,
                                start_new_session=True, preexec_fn=ignore if ignoring else None)


def stop(process: subprocess.Popen[bytes], grace_s: float = 10) -> None:
    """SIGTERM, ``grace_s`` to exit, then SIGKILL to whatever is left of its process group."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait()


def children_map() -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                ppid = int(stat.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    return children


def descendants(pid: int) -> set[int]:
    """``pid`` and every process below it, now."""
    tree, found, todo = children_map(), set(), [pid]
    while todo:
        current = todo.pop()
        if current not in found:
            found.add(current)
            todo.extend(tree.get(current, []))
    return found


def command_line(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return handle.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def alive(pids: set[int]) -> set[int]:
    """Those of ``pids`` still running (a zombie waiting for its parent is not)."""
    running = set()
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as stat:
                state = stat.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state not in ("Z", "X"):
            running.add(pid)
    return running


def runners_below(pid: int) -> set[int]:
    """The runner processes (sandboxed or not) below ``pid``."""
    return {p for p in descendants(pid)
            if "gradci.worker.runner_child" in command_line(p) or "gradci.worker.sandbox" in command_line(p)}


def control_nodes_below(pid: int) -> set[int]:
    """The control nodes' main processes below ``pid`` (a CPU worker's, not their pool processes)."""
    from gradci.worker.control_keeper import CONTROL_NODE_MODULE

    found = {p for p in alive(descendants(pid)) if CONTROL_NODE_MODULE in command_line(p)}
    tree = children_map()
    return found - {child for node in found for child in tree.get(node, [])}  # a pool's command line is its node's


def wait_gone(pids: set[int], timeout_s: float) -> float:
    """Seconds until none of ``pids`` runs; fails naming the survivors after ``timeout_s``."""
    start = time.monotonic()
    while alive(pids):
        if time.monotonic() - start > timeout_s:
            left = {pid: command_line(pid)[:120] for pid in alive(pids)}
            raise AssertionError(f"processes left after {timeout_s} s: {left}")
        time.sleep(0.1)
    return time.monotonic() - start
