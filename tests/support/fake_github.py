"""A fake GitHub REST API served over real HTTP on loopback: it records every call and can be told to
fail the next N requests (to test retries and outages)."""
from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlparse


class FakeGitHub:
    def __init__(self) -> None:
        self.calls: list[dict] = []
        self.statuses: list[dict] = []
        self.comments: dict[int, dict] = {}          # id -> comment
        self.pulls: dict[tuple[str, int], dict] = {}  # (owner/name, number) -> pull request, see add_pull_request
        self.fail_next: list[int] = []               # status codes to answer before succeeding
        self._next_id = 1000
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> FakeGitHub:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()

    def comments_on(self, full_name: str, pr_number: int) -> list[dict]:
        return [c for c in self.comments.values() if c["repo"] == full_name and c["pr"] == pr_number]

    def statuses_for(self, sha: str, context: str | None = None) -> list[dict]:
        return [s for s in self.statuses if s["sha"] == sha and (context is None or s["context"] == context)]

    def add_pull_request(self, full_name: str, number: int, *, fork: bool = False, labels: tuple[str, ...] = ()) -> dict:
        """A pull request GET /repos/{full_name}/pulls/{number} answers, from a fork's branch or the repository's own."""
        head_repo = f"{'someone-else' if fork else full_name.split('/')[0]}/{full_name.split('/')[1]}"
        self.pulls[full_name, number] = {"number": number, "labels": [{"name": label} for label in labels],
                                         "head": {"repo": {"full_name": head_repo}},
                                         "base": {"repo": {"full_name": full_name}}}
        return self.pulls[full_name, number]

    def _handle(self, method: str, path: str, body: dict | None, headers: dict) -> tuple[int, object]:
        with self._lock:
            call = {"method": method, "path": path, "body": body, "headers": headers}
            self.calls.append(call)
            if self.fail_next:
                call["answered"] = self.fail_next.pop(0)
                return call["answered"], {"message": "planned failure"}
            call["answered"] = "ok"
            parts = urlparse(path).path.strip("/").split("/")
            if method == "GET" and len(parts) == 5 and parts[0] == "repos" and parts[3] == "pulls":
                pull = self.pulls.get((f"{parts[1]}/{parts[2]}", int(parts[4])))
                return (200, pull) if pull is not None else (404, {"message": "Not Found"})
            if method == "POST" and len(parts) == 5 and parts[0] == "repos" and parts[3] == "statuses":
                if len(body.get("description", "")) > 140:
                    return 422, {"message": "description is too long (maximum is 140 characters)"}
                record = {"repo": f"{parts[1]}/{parts[2]}", "sha": parts[4], **body}
                self.statuses.append(record)
                return 201, record
            if len(parts) == 6 and parts[3] == "issues" and parts[5] == "comments":
                repo, pr = f"{parts[1]}/{parts[2]}", int(parts[4])
                if method == "GET":
                    return 200, [{"id": c["id"], "body": c["body"]} for c in self.comments_on(repo, pr)]
                if method == "POST":
                    if len(body.get("body", "")) > 65536:
                        return 422, {"message": "body is too long"}
                    self._next_id += 1
                    self.comments[self._next_id] = {"id": self._next_id, "repo": repo, "pr": pr, "body": body["body"]}
                    return 201, self.comments[self._next_id]
            if method == "PATCH" and len(parts) == 6 and parts[3] == "issues" and parts[4] == "comments":
                comment = self.comments.get(int(parts[5]))
                if comment is None:
                    return 404, {"message": "Not Found"}
                comment["body"] = body["body"]
                return 200, comment
            return 404, {"message": "Not Found"}

    def _handler(self):
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def _serve(self, method: str) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                body = json.loads(raw) if raw else None
                code, payload = fake._handle(method, self.path, body, dict(self.headers))
                data = json.dumps(payload).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                self._serve("GET")

            def do_POST(self):
                self._serve("POST")

            def do_PATCH(self):
                self._serve("PATCH")

            def log_message(self, *args):
                pass

        return Handler
