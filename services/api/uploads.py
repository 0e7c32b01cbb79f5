"""POST /api/uploads: results checked by a project's own CI (``gradci check --upload``).

What can be refused without the body is refused before a byte of it is read: a declared size over
``GRADCI_UPLOAD_MAX_BYTES`` (413) and a missing or unknown credential (401). The body is then read
with the same bound as it streams in (to a spooled file: 256 KiB in memory, the rest on disk), and
parsed, checked and stored off the event loop, ``UPLOADS_AT_ONCE`` at a time, each as it streams
(``gradci.services.uploads.stream``: a few MiB per upload whatever its size).
"""
from __future__ import annotations

from typing import Any

from anyio import CapacityLimiter, to_thread
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel

from gradci.services.api.deps import SettingsDep
from gradci.services.api.errors import errors
from gradci.services.bodies import PayloadTooLarge, declared_too_large, read_bounded
from gradci.services.uploads import access
from gradci.services.uploads.intake import UploadAccepted, receive
from gradci.services.uploads.schema import UploadIn

router = APIRouter(tags=["uploads"])

# As for webhooks: past a few threads, storing only queues for the GIL and the connection pool; each
# upload parsed holds at most stream.CELLS_AT_ONCE × stream.MAX_ITEM_BYTES of cells (about 6 MiB).
UPLOADS_AT_ONCE = 4
_limiter = CapacityLimiter(UPLOADS_AT_ONCE)


class InvalidField(BaseModel):
    loc: list[str | int]
    msg: str
    type: str


class InvalidUpload(BaseModel):
    detail: list[InvalidField]


def inlined_schema(model: type[BaseModel]) -> dict[str, Any]:
    """``model``'s JSON schema with its definitions written in place.

    An OpenAPI requestBody given by hand cannot point into the schema's own ``$defs``.
    """
    schema = model.model_json_schema()
    definitions = schema.pop("$defs", {})

    def inline(node: Any) -> Any:
        if isinstance(node, dict):
            if "$ref" in node:
                return inline(definitions[node["$ref"].rsplit("/", 1)[-1]])
            return {key: inline(value) for key, value in node.items()}
        if isinstance(node, list):
            return [inline(item) for item in node]
        return node

    return inline(schema)


def _error(status: int, detail: str, **headers: str) -> JSONResponse:
    return JSONResponse({"detail": detail}, status_code=status, headers=headers or None)


@router.post("/api/uploads", status_code=202, responses={
    202: {"model": UploadAccepted, "description": "Stored in the commit's upload run"},
    **errors(401, 403, 409, 413),
    422: {"model": InvalidUpload, "description": "The body is not an upload: each invalid field, named"},
}, openapi_extra={"requestBody": {"required": True, "content": {"application/json": {
    "schema": inlined_schema(UploadIn)}}}})
async def upload(request: Request, settings: SettingsDep) -> JSONResponse:
    """One shard of a commit's cells, from ``gradci check --upload``.

    Needs ``Authorization: Bearer`` with an upload token of the repository, or a GitHub Actions OIDC id
    token of it.
    """
    limit = settings.upload_max_bytes
    if declared_too_large(request, limit):
        return _error(413, f"payload larger than {limit} bytes")
    token = access.bearer(request.headers.get("authorization"))
    if token is None:
        return _error(401, "an upload needs 'Authorization: Bearer <upload token or id token>'",
                      **{"WWW-Authenticate": "Bearer"})
    try:
        credential = await to_thread.run_sync(access.authenticate, settings, token, limiter=_limiter)
    except access.NotAuthenticated as exc:
        return _error(401, str(exc), **{"WWW-Authenticate": "Bearer"})
    except access.Unavailable as exc:
        return _error(503, str(exc))
    try:
        body = await read_bounded(request.stream(), limit)
    except PayloadTooLarge:
        return _error(413, f"payload larger than {limit} bytes")
    dashboard = settings.public_url or str(request.base_url)

    def work() -> tuple[int, dict]:
        with body:
            return receive(settings, credential, body, dashboard)

    status, content = await to_thread.run_sync(work, limiter=_limiter)
    return JSONResponse(content, status_code=status)
