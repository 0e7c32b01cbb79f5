"""The webhook body is anyone's until its signature matches: refused from the headers where they
suffice, hashed while it streams in within a bounded buffer, parsed only once verified. A real
uvicorn server over HTTP where memory, timing or the socket matter; the in-process client elsewhere."""
from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from bench.load import SECRET as SERVER_SECRET
from bench.load import Server, api_server
from gradci._testing.databases import flushed
from gradci.services.db.migrate import upgrade
from gradci.services.db.session import dispose_engine
from gradci.services.github.signature import sign
from tests.support.payloads import payload
from tests.support.webhook_client import deliver, runs, webhook_headers

pytestmark = pytest.mark.integration


MiB = 1024 * 1024
CONCURRENT, LARGE = 16, 24 * MiB
RSS_GROWTH_LIMIT_MIB = 64
# Well formed, so only the whole body can show it is wrong.
WRONG_SIGNATURE = "sha256=" + "0" * 64


@pytest.fixture(scope="module")
def spill_directory(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The server's TMPDIR: where bodies too large for memory are spooled while they are verified."""
    return tmp_path_factory.mktemp("spill")


@pytest.fixture(scope="module")
def server(redis_database: str, tmp_path_factory: pytest.TempPathFactory, spill_directory: Path) -> Iterator[Server]:
    """One server for the module (starting one costs seconds); these requests never reach the
    database or the broker beyond a ping."""
    workdir = tmp_path_factory.mktemp("webhook-server")
    database_url = f"sqlite:///{workdir / 'gradci.db'}"
    upgrade(database_url)
    with api_server(database_url, flushed(redis_database), workdir, TMPDIR=str(spill_directory)) as served:
        yield served
    dispose_engine(database_url)


def _status_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    raise LookupError(field)


def _reset_peak_rss(pid: int) -> None:
    Path(f"/proc/{pid}/clear_refs").write_text("5")  # proc(5): resets VmHWM to the current RSS


async def _post_concurrently(url: str, body: bytes, headers: dict[str, str], count: int) -> list[int]:
    async with httpx.AsyncClient(base_url=url, timeout=120) as http:
        answers = await asyncio.gather(*(http.post("/webhooks/github", content=body, headers=headers)
                                         for _ in range(count)))
    return [answer.status_code for answer in answers]


def test_concurrent_large_unsigned_bodies_keep_the_servers_memory_bounded(server: Server, spill_directory: Path):
    """16 concurrent 24 MB bodies whose signature is wrong: each is read to its end (only then can
    the signature be compared) without the server's resident memory growing by more than 64 MiB,
    and nothing of them is left on disk."""
    ping = json.dumps(payload("ping")).encode()
    assert httpx.post(f"{server.url}/webhooks/github", content=ping,
                      headers=webhook_headers("ping", ping, secret=SERVER_SECRET)).status_code == 200
    body = b"x" * LARGE
    headers = webhook_headers("ping", body, signed=False) | {"X-Hub-Signature-256": WRONG_SIGNATURE}
    before_kib = _status_kib(server.pid, "VmRSS")
    _reset_peak_rss(server.pid)
    statuses = asyncio.run(_post_concurrently(server.url, body, headers, CONCURRENT))
    growth_mib = (_status_kib(server.pid, "VmHWM") - before_kib) / 1024
    assert statuses == [401] * CONCURRENT
    assert growth_mib <= RSS_GROWTH_LIMIT_MIB, f"the server grew by {growth_mib:.0f} MiB"
    assert list(spill_directory.iterdir()) == []


def _answer_to_headers_alone(server: Server, headers: dict[str, str]) -> str:
    """The status line the server sends to a request head whose body never comes."""
    host, port = server.url.removeprefix("http://").split(":")
    head = "".join(f"{name}: {value}\r\n" for name, value in headers.items())
    with socket.create_connection((host, int(port)), timeout=10) as connection:
        connection.sendall(f"POST /webhooks/github HTTP/1.1\r\nHost: {host}\r\n{head}\r\n".encode())
        return connection.recv(4096).decode(errors="replace").split("\r\n", 1)[0]


@pytest.mark.parametrize(("signature", "length", "status"), [
    (None, LARGE, "401"),                                 # no signature: nothing to verify against
    ("sha256=abc", LARGE, "401"),                         # truncated: can never match
    (WRONG_SIGNATURE, 25 * MiB + 1, "413"),               # declared past GitHub's 25 MB cap
])
def test_what_the_headers_refuse_is_refused_before_the_body_is_read(server: Server, signature, length, status):
    headers = {"X-GitHub-Event": "ping", "X-GitHub-Delivery": "d-head", "Content-Type": "application/json",
               "Content-Length": str(length)}
    if signature:
        headers["X-Hub-Signature-256"] = signature
    assert _answer_to_headers_alone(server, headers).split(" ")[1] == status


def test_a_body_streamed_past_the_cap_without_a_length_is_413(client):
    def chunks() -> Iterator[bytes]:
        for _ in range(26):
            yield b" " * MiB

    headers = {"X-GitHub-Event": "ping", "X-GitHub-Delivery": "d-stream", "X-Hub-Signature-256": WRONG_SIGNATURE}
    assert client.post("/webhooks/github", content=chunks(), headers=headers).status_code == 413


def _signature_cases() -> dict[str, tuple[bytes, dict[str, str]]]:
    raw = json.dumps(payload("pull_request.opened")).encode()
    good = sign("webhook-s3cret", raw)
    base = {"X-GitHub-Event": "pull_request", "X-GitHub-Delivery": "d-sig", "Content-Type": "application/json"}
    return {
        "missing": (raw, base),
        "empty": (raw, base | {"X-Hub-Signature-256": ""}),
        "sha1 prefix": (raw, base | {"X-Hub-Signature-256": good.replace("sha256=", "sha1=")}),
        "truncated": (raw, base | {"X-Hub-Signature-256": good[:-1]}),
        "wrong secret": (raw, base | {"X-Hub-Signature-256": sign("guess", raw)}),
        "truncated body": (raw[:-100], base | {"X-Hub-Signature-256": good}),
        "body with more": (raw + b" ", base | {"X-Hub-Signature-256": good}),
        "non-hex digest": (raw, base | {"X-Hub-Signature-256": "sha256=" + "z" * 64}),
    }


@pytest.mark.parametrize("case", list(_signature_cases()))
def test_wrong_missing_or_truncated_signatures_are_401_and_store_nothing(client, settings, case):
    raw, headers = _signature_cases()[case]
    assert client.post("/webhooks/github", content=raw, headers=headers).status_code == 401
    assert runs(settings.database_url) == []


def test_json_is_parsed_only_once_the_signature_matched(client):
    assert deliver(client, "ping", b"{not json", signed=False).status_code == 401
    assert deliver(client, "ping", b"{not json").status_code == 400
    assert deliver(client, "ping", b"[1, 2]").status_code == 400
