"""POST /webhooks/github: verify, store, decide, queue — and answer at once."""
from __future__ import annotations

import json

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse

from services.api.deps import SettingsDep
from services.db.session import sessionmaker_for
from services.github import intake, signature

router = APIRouter(tags=["github"])

MAX_BODY_BYTES = 25 * 1024 * 1024  # GitHub caps payloads at 25 MB


def _error(status: int, detail: str) -> JSONResponse:
    return JSONResponse({"detail": detail}, status_code=status)


async def _read_capped(request: Request) -> bytes | None:
    """The raw body (the signature covers these exact bytes), or None past the cap."""
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > MAX_BODY_BYTES:
        return None
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


@router.post("/webhooks/github", status_code=202)
async def github_webhook(request: Request, settings: SettingsDep) -> JSONResponse:
    if settings.github_webhook_secret is None:
        return _error(503, "GRADCI_GITHUB_WEBHOOK_SECRET is not set: webhooks are refused")
    body = await _read_capped(request)
    if body is None:
        return _error(413, f"payload larger than {MAX_BODY_BYTES} bytes")
    if not signature.verify(settings.github_webhook_secret.get_secret_value(), body,
                            request.headers.get("x-hub-signature-256")):
        return _error(401, "missing or invalid X-Hub-Signature-256")
    event, delivery_id = request.headers.get("x-github-event"), request.headers.get("x-github-delivery")
    if not event or not delivery_id:
        return _error(400, "X-GitHub-Event and X-GitHub-Delivery headers are required")
    try:
        payload = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        return _error(400, f"malformed JSON: {exc}")
    if not isinstance(payload, dict):
        return _error(400, "the payload must be a JSON object")

    def work() -> tuple[int, dict]:
        with sessionmaker_for(settings.database_url)() as session:
            return intake.handle(session, settings, event, delivery_id[:64], payload)

    status, content = await run_in_threadpool(work)
    return JSONResponse(content, status_code=status)
