"""What a runner prints, forwarded to the worker's log up to a budget per request, the rest dropped.

Scenario code may print without end (a debugging loop left in a pull request): without a cap the
worker's log grows by hundreds of megabytes. A thread drains the runner's output pipe continuously,
so the runner never blocks on a full pipe, and forwards at most ``limit_bytes`` per request.
"""
from __future__ import annotations

import os
import threading
from typing import IO

TAIL_BYTES = 16 << 10  # the last output of a request kept whatever the budget: a crash's traceback is there


class OutputDrain:
    def __init__(self, stream: IO[bytes], limit_bytes: int, sink_fd: int = 2) -> None:
        self.stream, self.limit_bytes, self.sink_fd = stream, limit_bytes, sink_fd
        self._lock = threading.Lock()
        self._left = limit_bytes
        self._tail = b""
        self.dropped = 0
        self._thread = threading.Thread(target=self._pump, name="gradci-runner-output", daemon=True)
        self._thread.start()

    def _pump(self) -> None:
        while chunk := self.stream.read1(1 << 16):  # type: ignore[attr-defined]  # a pipe: a BufferedReader, typed IO[bytes]
            with self._lock:
                kept, self._left = chunk[:max(self._left, 0)], self._left - len(chunk)
                self.dropped += len(chunk) - len(kept)
                self._tail = (self._tail + chunk)[-TAIL_BYTES:]
            if kept:
                os.write(self.sink_fd, kept)

    def next_request(self) -> None:
        """Start a fresh budget for the next request.

        A line goes in the log for what the last one dropped. Called when a request was answered: what the
        runner printed for it came before its answer.
        """
        with self._lock:
            dropped, self.dropped, self._left, self._tail = self.dropped, 0, self.limit_bytes, b""
        if dropped:
            os.write(self.sink_fd, f"\n[gradci: {dropped} bytes of the runner's output dropped, over the limit of "
                                   f"{self.limit_bytes} bytes per request]\n".encode())

    def close(self) -> str:
        """Wait for the pipe's end, and give the end of what the runner printed for its last request.

        The runner is dead by now. What was dropped is reported.
        """
        self._thread.join(timeout=5)
        with self._lock:
            tail = self._tail.decode(errors="replace")
        self.next_request()
        return tail
