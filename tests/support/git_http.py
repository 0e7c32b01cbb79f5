"""A git repository served over HTTP on loopback with git's "dumb" protocol (static files after
``git update-server-info``), for tests whose runs clone from an ``http://`` URL as they would from a
git host. It records the ``Authorization`` header of each request, so a test sees what credentials
the workers sent."""
from __future__ import annotations

import functools
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from gradci._testing.repos import git


class _Handler(SimpleHTTPRequestHandler):
    def __init__(self, *args: Any, seen: list[str | None], **kwargs: Any) -> None:
        self._seen = seen
        super().__init__(*args, **kwargs)

    def do_GET(self) -> None:
        self._seen.append(self.headers.get("Authorization"))
        super().do_GET()

    def log_message(self, format: str, *args: Any) -> None:  # quiet: pytest shows failures, not every GET
        pass


@contextmanager
def served_repository(source: Path, root: Path, name: str = "owner/checks.git") -> Iterator[tuple[str, list[str | None]]]:
    """A bare copy of the repository ``source`` under ``root``, served at ``http://127.0.0.1:<port>/<name>``:
    (its URL, the Authorization header of every request so far, None where a request had none)."""
    bare = root / name
    bare.parent.mkdir(parents=True, exist_ok=True)
    git(root, "clone", "--quiet", "--bare", str(source), str(bare))
    git(bare, "update-server-info")  # the dumb protocol's index of refs and packs
    seen: list[str | None] = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Handler, seen=seen, directory=str(root)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/{name}", seen
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
