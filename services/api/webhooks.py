"""POST /webhooks/github: verify the delivery while its body streams in, decide, store, and answer.

What is to be acted on is stored before the answer; the worker is told after it
(``gradci.services.github.intake``).

Until the signature matches, a request is anyone's: what can be refused from the headers alone
(no or a malformed signature, a declared size over the cap) is refused before a byte of the body
is read, the body is hashed as it arrives within a bounded buffer, and JSON is parsed only once the
bytes are known to come from GitHub.
"""
from __future__ import annotations

import asyncio
import functools
import json
from concurrent.futures import ThreadPoolExecutor
from typing import IO

from anyio import CapacityLimiter, to_thread
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from gradci.services.api.deps import SettingsDep
from gradci.services.api.errors import errors
from gradci.services.db.session import sessionmaker_for
from gradci.services.github import intake, signature

router = APIRouter(tags=["github"])

MAX_BODY_BYTES = 25 * 1024 * 1024  # GitHub caps payloads at 25 MB
DELIVERY_ID_LENGTH = 64  # deliveries.delivery_id
# Storing a delivery holds the GIL and a pooled database connection: past a few threads, more only
# queue for both, and with anyio's default of 40 the process spent its CPU handing the GIL around
# (at 80 deliveries/s on 2 cores: 64/s achieved and p50 2.5 s; with 4 threads, 80/s and p50 33 ms).
INTAKE_THREADS = 4
_intake_limiter = CapacityLimiter(INTAKE_THREADS)
# The stored deliveries' messages go out after the answer, from threads of their own: the answer waits
# for no broker (one that is down holds a send for seconds), and a send lost with the process is the
# reconciler's to make.
ANNOUNCE_THREADS = 2


@functools.cache
def _announcer() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(ANNOUNCE_THREADS, thread_name_prefix="gradci-announce")


def _error(status: int, detail: str) -> JSONResponse:
    return JSONResponse({"detail": detail}, status_code=status)


def _payload(body: IO[bytes]) -> dict | str:
    """The JSON object of a verified body, or why it is not one."""
    try:
        payload = json.load(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        return f"malformed JSON: {exc}"
    return payload if isinstance(payload, dict) else "the payload must be a JSON object"


@router.post("/webhooks/github", status_code=202, responses={
    202: {"description": "Stored, for a worker to act on (what was decided: run_pr, cancel_pr or baseline), "
                         "or ignored (why)"},
    200: {"description": "A ping, or a delivery already stored (a redelivery)"},
    **errors(400, 401, 403, 413),
})
async def github_webhook(request: Request, settings: SettingsDep) -> JSONResponse:
    if settings.github_webhook_secret is None:
        return _error(503, "GRADCI_GITHUB_WEBHOOK_SECRET is not set: webhooks are refused")
    try:
        body = await signature.verified_body(request, settings.github_webhook_secret.get_secret_value(),
                                             MAX_BODY_BYTES)
    except signature.Refused as exc:
        return _error(exc.status, exc.detail)
    event, delivery_id = request.headers.get("x-github-event"), request.headers.get("x-github-delivery")
    if not event or not delivery_id:
        body.close()
        return _error(400, "X-GitHub-Event and X-GitHub-Delivery headers are required")

    def work() -> intake.Received:
        # Parsing and storing run off the event loop: a large payload must not stall other requests.
        with body:
            payload = _payload(body)
        if isinstance(payload, str):
            return intake.Received(400, {"detail": payload})
        with sessionmaker_for(settings.database_url)() as session:
            return intake.receive(session, settings, event, delivery_id[:DELIVERY_ID_LENGTH], payload)

    received = await to_thread.run_sync(work, limiter=_intake_limiter)
    if received.stored is not None:  # stored and committed: now the worker may be told
        asyncio.get_running_loop().run_in_executor(_announcer(), intake.announce, settings, received.stored)
    return JSONResponse(received.body, status_code=received.status)
