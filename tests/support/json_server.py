"""A JSON API served over real HTTP on loopback, in a thread: the shape of the fakes that stand in
for what is outside this machine (GitHub, an OIDC issuer). A subclass answers ``answer(method, path,
body, headers)`` with (status, JSON payload) — or (status, ``Reply``) for a page or a redirect, as
GitHub's sign-in pages answer; a form-encoded body arrives as a dict. Used as a context manager, it
serves while inside."""
from __future__ import annotations

import dataclasses
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self
from urllib.parse import parse_qsl


@dataclasses.dataclass(frozen=True)
class Reply:
    """An answer that is not JSON: a body of its own type, and headers (``Location`` of a redirect)."""

    body: bytes = b""
    content_type: str = "text/html; charset=utf-8"
    headers: dict[str, str] = dataclasses.field(default_factory=dict)


def parsed_body(raw: bytes, content_type: str) -> Any:
    if not raw:
        return None
    if content_type.startswith("application/x-www-form-urlencoded"):
        return dict(parse_qsl(raw.decode()))
    return json.loads(raw)


class JsonServer:
    def __init__(self) -> None:
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        """Stop serving and release the port."""
        self._server.shutdown()
        self._server.server_close()

    def answer(self, method: str, path: str, body: Any, headers: dict[str, str]) -> tuple[int, Any]:
        raise NotImplementedError

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def _serve(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                code, payload = server.answer(self.command, self.path,
                                              parsed_body(raw, self.headers.get("Content-Type") or ""),
                                              dict(self.headers))
                reply = payload if isinstance(payload, Reply) else Reply(json.dumps(payload).encode(),
                                                                          "application/json")
                data = reply.body
                self.send_response(code)
                for name, value in reply.headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Type", reply.content_type)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = _serve

            def log_message(self, *args: Any) -> None:
                pass

        return Handler
