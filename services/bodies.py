"""Request bodies read with a bound, for the routes that read their body themselves.

Those routes are the webhooks and uploads. A declared size over the limit is refused before a byte
is read, and a body that grows past it while it streams in (chunked, or lying about its length) is
refused as soon as it does.

The bytes go to a spooled file that holds at most ``IN_MEMORY_BYTES`` in memory and spills the rest
to disk: until the request is known to be good, the bytes come from anyone, so neither their size
nor their number may decide how much memory the service uses.
"""
from __future__ import annotations

import tempfile
from collections.abc import AsyncIterable, Callable
from typing import IO

from fastapi import Request

# Webhook payloads and most uploads are tens of kilobytes: they stay in memory; larger ones go to disk.
IN_MEMORY_BYTES = 256 * 1024


class PayloadTooLarge(Exception):
    """The body grew past the limit while it streamed in."""


async def read_request_body(request: Request, limit: int,
                            observe: Callable[[bytes], None] | None = None) -> IO[bytes]:
    """The request's whole body, read once with a bound: ``read_bounded`` after the declared size.

    Raises ``PayloadTooLarge`` before a byte is read when the Content-Length is over ``limit``, and as
    soon as more than ``limit`` bytes arrived otherwise.
    """
    if declared_too_large(request, limit):
        raise PayloadTooLarge(f"payload larger than {limit} bytes")
    return await read_bounded(request.stream(), limit, observe)


def declared_too_large(request: Request, limit: int) -> bool:
    """The request's Content-Length is over ``limit`` (nothing need be read to refuse it)."""
    declared = request.headers.get("content-length")
    return bool(declared and declared.isdigit() and int(declared) > limit)


async def read_bounded(chunks: AsyncIterable[bytes], limit: int,
                       observe: Callable[[bytes], None] | None = None) -> IO[bytes]:
    """The whole body, rewound, in a spooled temporary file the caller closes.

    ``observe`` sees each chunk as it arrives (a hash of the body, say). Raises ``PayloadTooLarge`` as
    soon as more than ``limit`` bytes arrived: the rest is never read.
    """
    body = tempfile.SpooledTemporaryFile(max_size=IN_MEMORY_BYTES)
    try:
        size = 0
        async for chunk in chunks:
            size += len(chunk)
            if size > limit:
                raise PayloadTooLarge(f"payload larger than {limit} bytes")
            if observe is not None:
                observe(chunk)
            body.write(chunk)
        body.seek(0)
        return body
    except BaseException:
        body.close()
        raise
