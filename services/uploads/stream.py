"""An upload body read as it streams, never whole.

Its memory is bounded by these constants, not by the body's size.

The body (already on disk past ``bodies.IN_MEMORY_BYTES``) is read three times by ijson's C parser:
once for the header — every top-level field but ``scenarios`` and ``cells``, which is what deciding
whether to accept the upload needs — then, once accepted, for the scenarios and for the cells, each
item validated on its own and handed on in batches of ``CELLS_AT_ONCE`` that are stored and freed.
Nothing big is built on the way: the header's pass refuses the body once more than ``MAX_ITEM_BYTES``
of it pass without a complete value (one string or number), measures every scenario and cell without
building it (none may be over ``MAX_ITEM_BYTES``, nor more than the schema's number of them), and
builds at most ``MAX_HEADER_EVENTS`` values of the rest. So one upload holds at most about
``CELLS_AT_ONCE × MAX_ITEM_BYTES`` of cells (6.4 MiB; each bound is loose by up to two of the
parser's ``BUFFER_BYTES`` reads), whatever the body's size (up to ``GRADCI_UPLOAD_MAX_BYTES``).
"""
from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import IO, Any, TypeVar

import ijson  # type: ignore[import-untyped]  # no stubs; the C parser (yajl2_c) is what runs
from pydantic import BaseModel, ValidationError

from gradci.services.db.record_schema import MAX_RULES, UploadedRule
from gradci.services.uploads.schema import MAX_CELLS, MAX_SCENARIOS, UploadedCell, UploadedScenario, UploadHeader

T = TypeVar("T")

MAX_ITEM_BYTES = 64 * 1024  # the JSON of one cell or scenario (a cell's message: a traceback, say)
CELLS_AT_ONCE = 100  # cells validated and stored per statement: 100 × 64 KiB at most in memory
MAX_HEADER_EVENTS = 10_000  # values in the fields besides scenarios and cells ([report] targets, shards)
BUFFER_BYTES = 16 * 1024  # what the parser reads at once: the bounds below are this loose
STREAMED = ("scenarios", "cells", "rules")  # the top-level lists read item by item


class InvalidUpload(Exception):
    """The body is not an upload; ``errors``: FastAPI's 422 entries, each naming its field."""

    def __init__(self, errors: list[dict[str, Any]]) -> None:
        super().__init__("; ".join(f"{'.'.join(map(str, error['loc']))}: {error['msg']}" for error in errors))
        self.errors = errors


def _invalid(loc: tuple[str | int, ...], msg: str, kind: str) -> InvalidUpload:
    return InvalidUpload([{"loc": ["body", *loc], "msg": msg, "type": kind}])


class _CountingReader:
    """The body as the parser reads it, refused once ``MAX_ITEM_BYTES`` pass without a complete value.

    ``mark`` says a value was completed; past the bound, one string or number that long is being built
    in memory.
    """

    def __init__(self, raw: IO[bytes]) -> None:
        raw.seek(0)
        self.raw, self.position, self.unmarked = raw, 0, 0

    def read(self, size: int = -1) -> bytes:
        chunk = self.raw.read(size)
        self.position += len(chunk)
        self.unmarked += len(chunk)
        if self.unmarked > MAX_ITEM_BYTES + BUFFER_BYTES:  # the parser reads ahead by its buffer
            raise _invalid((), f"a single value in the body is over {MAX_ITEM_BYTES} bytes", "value_too_large")
        return chunk

    def mark(self) -> None:
        self.unmarked = 0


OPENING = ("start_map", "start_array")
CLOSING = ("end_map", "end_array")
LIMITS = {"scenarios": MAX_SCENARIOS, "cells": MAX_CELLS, "rules": MAX_RULES}


class _ListSizes:
    """What the header's pass sees of a streamed list without building it.

    That it is a list, how many items it has, and that none is over ``MAX_ITEM_BYTES`` (give or take the
    parser's buffer).
    """

    def __init__(self, name: str) -> None:
        self.name, self.item = name, f"{name}.item"
        self.first_event: str | None = None
        self.count, self.item_start = 0, 0

    def see(self, prefix: str, event: str, position: int) -> None:
        if prefix == self.name:
            self.first_event = self.first_event or event
        elif prefix == self.item and event != "map_key":
            if event in CLOSING:
                if position - self.item_start > MAX_ITEM_BYTES + BUFFER_BYTES:
                    raise _invalid((self.name, self.count - 1), f"an item over {MAX_ITEM_BYTES} bytes", "too_large")
                return
            self.count, self.item_start = self.count + 1, position
            if self.count > LIMITS[self.name]:
                raise _invalid((self.name,), f"List should have at most {LIMITS[self.name]} items", "too_long")

    def check(self) -> None:
        if self.first_event is None and self.name == "cells":
            raise _invalid((self.name,), "Field required", "missing")
        if self.first_event not in (None, "start_array"):
            raise _invalid((self.name,), "Input should be a valid list", "list_type")
        if self.name == "cells" and self.count == 0:
            raise _invalid((self.name,), "List should have at least 1 item after validation, not 0", "too_short")


def _parse_errors(exc: Exception) -> InvalidUpload:
    return _invalid((), f"malformed JSON: {exc}", "json_invalid")


def validation_errors(exc: ValidationError, *loc: str | int) -> list[dict[str, Any]]:
    """FastAPI's shape of a 422: each invalid field's location in the body, and what is wrong."""
    return [{"loc": ["body", *loc, *error["loc"]], "msg": error["msg"], "type": error["type"]}
            for error in exc.errors(include_url=False, include_context=False, include_input=False)]


def read_header(raw: IO[bytes]) -> UploadHeader:
    """The upload's header: every field but the scenarios and cells, which are only measured here.

    Raises ``InvalidUpload``. Reads the whole body: malformed JSON anywhere is found now, and the item
    passes that follow build nothing larger than it measured.
    """
    reader = _CountingReader(raw)
    builder, events = ijson.ObjectBuilder(), 0
    lists = {name: _ListSizes(name) for name in STREAMED}
    try:
        for prefix, event, value in ijson.parse(reader, buf_size=BUFFER_BYTES, use_float=True):
            reader.mark()
            listed = lists.get(prefix.partition(".")[0])
            if listed is not None:
                listed.see(prefix, event, reader.position)
                continue
            if prefix == "" and event == "map_key" and value in STREAMED:
                continue
            events += 1
            if events > MAX_HEADER_EVENTS:
                raise _invalid((), f"the fields besides scenarios and cells hold over {MAX_HEADER_EVENTS} values",
                               "header_too_large")
            builder.event(event, value)
    except ijson.JSONError as exc:
        raise _parse_errors(exc) from None
    if not isinstance(builder.value, dict):
        raise _invalid((), "an upload is a JSON object", "model_type")
    for listed in lists.values():
        listed.check()
    try:
        return UploadHeader.model_validate(builder.value)
    except ValidationError as exc:
        raise InvalidUpload(validation_errors(exc)) from None


def _items(raw: IO[bytes], name: str, model: type[BaseModel]) -> Iterator[BaseModel]:
    """The list ``name``'s items, each validated as ``model``.

    Their number and sizes were measured by ``read_header``.
    """
    raw.seek(0)
    for index, item in enumerate(ijson.items(raw, f"{name}.item", buf_size=BUFFER_BYTES, use_float=True)):
        try:
            yield model.model_validate(item)
        except ValidationError as exc:
            raise InvalidUpload(validation_errors(exc, name, index)) from None


def scenarios(raw: IO[bytes]) -> Iterator[UploadedScenario]:
    """The body's scenarios, validated one by one (``InvalidUpload`` at the first bad one)."""
    yield from _items(raw, "scenarios", UploadedScenario)  # type: ignore[misc]


def batches(items: Iterable[T], size: int) -> Iterator[list[T]]:
    """``items`` in lists of ``size`` (the last one shorter)."""
    batch: list[T] = []
    for item in items:
        batch.append(item)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def rules(raw: IO[bytes]) -> Iterator[UploadedRule]:
    """The body's rules, validated one by one (``InvalidUpload`` at the first bad one)."""
    yield from _items(raw, "rules", UploadedRule)  # type: ignore[misc]


def cell_rows(raw: IO[bytes]) -> Iterator[dict[str, Any]]:
    """The body's cells as rows to store, validated one by one (``InvalidUpload`` at the first bad one).

    A cell's rule-coverage record stays under its key; its power record is the one the service keeps
    (``UploadedPower.record``: summary fields recomputed). Neither is stored with the cell's fields.
    """
    for cell in _items(raw, "cells", UploadedCell):
        row = cell.model_dump(exclude={"power"})
        if cell.power is not None:  # type: ignore[attr-defined]  # the cell record's fields are built at import
            row["power"] = cell.power.record()  # type: ignore[attr-defined]
        yield row
