"""The warm runner's protocol: the requests and answers, one JSON object per line.

Every request the worker sends ``gradci.worker.runner_child`` and every line the runner answers
with. Both ends build and read these records, and nothing else spells the wire format. Standard
library only: the runner imports it inside its sandbox, before any framework.

Requests carry their ``op``; the runner's lines are told apart by their first key:

- ``{"ready": true, "pid", "rss_bytes"}``: the runner started (``Ready``);
- ``{"beat": true}``: a cell started computing, so the parent's timeout starts again (``Beat``);
- ``{"ok": false, "error", "rss_bytes"}``: the request was refused or raised (``Refusal``);
- ``{"ok": true, ...}``: the answer the request asked for (its ``answer`` type).

Every answer carries ``rss_bytes``, the runner's resident memory after it (None where /proc is not there).
"""
from __future__ import annotations

import dataclasses
import json
from typing import Any, ClassVar, NotRequired, TypedDict, TypeVar


class ProtocolError(ValueError):
    """A line that is no message of this protocol."""


M = TypeVar("M", bound="Answer")


class ScenarioEntry(TypedDict):
    """One scenario of a listing (``gradci.services.planner.ScenarioInfo.from_dict`` reads it)."""

    name: str
    operator: str
    dtypes: list[str]
    tags: list[str]
    fingerprint: str
    requirements: dict[str, Any]
    function: str  # the function's fingerprint: scenarios sharing it share references and evaluations
    lacks: list[str]  # frameworks it gives no f for: their backends get no cell of it
    file: str | None  # where its Scenario(...) call is, relative to the repository (None: outside it)
    line: int | None


class BackendEntry(TypedDict):
    name: str
    framework: str
    mode: str
    unavailable: NotRequired[str | None]  # why it cannot run here; only when availability was asked
    default: NotRequired[bool]  # checked where no backends are named (Backend.default); absent: True
    operators: NotRequired[list[str]]  # the only operators it has cells of (Backend.computes); absent: all


def _plain(value: Any) -> Any:
    """numpy scalars (a peak-memory count, say) as plain numbers."""
    return value.item() if hasattr(value, "item") else str(value)


def _fields(message: Any) -> dict[str, Any]:
    return {field.name: getattr(message, field.name) for field in dataclasses.fields(message)}


def _build(cls: type[M], data: dict[str, Any]) -> M:
    try:
        return cls(**data)
    except TypeError as exc:  # a missing or unknown field
        raise ProtocolError(f"not a {cls.__name__}: {exc}") from None


# --- answers ------------------------------------------------------------------------------------

@dataclasses.dataclass(kw_only=True)
class Answer:
    """What the runner says back to one request (``rss_bytes`` is set as it is sent)."""

    rss_bytes: int | None = None
    tag: ClassVar[dict[str, Any]] = {"ok": True}

    def to_json(self) -> str:
        return json.dumps({**self.tag, **_fields(self)}, default=_plain)


@dataclasses.dataclass(kw_only=True)
class Ready(Answer):
    pid: int
    tag: ClassVar[dict[str, Any]] = {"ready": True}


@dataclasses.dataclass
class Beat:
    def to_json(self) -> str:
        return json.dumps({"beat": True})


@dataclasses.dataclass(kw_only=True)
class Refusal(Answer):
    error: str
    tag: ClassVar[dict[str, Any]] = {"ok": False}


@dataclasses.dataclass(kw_only=True)
class ListReply(Answer):
    scenarios: list[ScenarioEntry]
    backends: list[BackendEntry]
    file_matrix: dict[str, Any]
    devices: list[str] | None = None  # only when availability was asked
    # Only when rules were asked: the checkout's derivative rules once its scenario modules are imported
    # (gradci.scenarios.rules.discovery.Rule.to_dict), each method with its source lines ("source").
    rules: list[dict[str, Any]] | None = None

    def __getitem__(self, name: str) -> Any:
        # Transitional: tests/worker/test_runner.py and bench/runner_memory.py still read a listing as
        # the JSON mapping it was (listing["scenarios"]); gone once they read its attributes.
        return getattr(self, name)


@dataclasses.dataclass(kw_only=True)
class WarmReply(Answer):
    unavailable: dict[str, str | None]  # per backend asked for: why it cannot run here (None: it can)
    device_memory: dict[str, Any]  # the GPU memory caps the runner applied (runner_child.cap_device_memory)


@dataclasses.dataclass(kw_only=True)
class CellsReply(Answer):
    cells: list[dict[str, Any]]  # Cell.to_dict() records, each with its scenario's fingerprint
    restart: str | None = None  # a device fault: why the runner must be restarted before the next request
    # With rule coverage asked for (options' "rule_coverage"): the checkout's derivative rules as they are
    # after these cells (gradci.scenarios.rules.discovery.Rule.to_dict); each cell carries its own record.
    rules: list[dict[str, Any]] | None = None
    # With "keep_references" asked for: the references computed for these cells, for later runs, each
    # {"key": cache key, "payload": base64 of the runner's encoding, "depends": what computing it read}.
    references: list[dict[str, Any]] | None = None


def parse_answer(line: bytes | str, expected: type[M]) -> M | Ready | Refusal | Beat:
    """One line from the runner, parsed.

    It is ``expected`` (the request's answer type), or a ``Ready``, ``Beat`` or ``Refusal``.
    """
    data = json.loads(line)
    if not isinstance(data, dict):
        raise ProtocolError(f"not a message: {str(line)[:200]}")
    if data.pop("beat", False):
        return Beat()
    if data.pop("ready", False):
        return _build(Ready, data)
    ok = data.pop("ok", None)
    if ok is False:
        return _build(Refusal, data)
    if ok is not True:
        raise ProtocolError(f"neither an answer nor a refusal: {str(line)[:200]}")
    return _build(expected, data)


# --- requests -----------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True, kw_only=True)
class ListRequest:
    """A request for a checkout's scenarios and ``[matrix]``, and the registered backends.

    The checkout is at ``source`` (None: the built-in library, or its ``family``). With ``availability``,
    also why each backend cannot run here and the devices there are (at the price of importing every
    framework).
    """

    source: str | None = None
    family: str | None = None
    availability: bool = False
    rules: bool = False  # also the checkout's derivative rules (the run's rule catalog)
    op: ClassVar[str] = "list"
    answer: ClassVar[type[Answer]] = ListReply


@dataclasses.dataclass(frozen=True, kw_only=True)
class WarmRequest:
    """Import the frameworks of ``backends`` once, outside any cell's timeout."""

    backends: list[str]
    warm_up: bool = False  # also one tiny derivative on each of them that can run (runner_child.warm_up)
    op: ClassVar[str] = "warm"
    answer: ClassVar[type[Answer]] = WarmReply


@dataclasses.dataclass(frozen=True, kw_only=True)
class CellsRequest:
    """A request for the cells of one scenario over ``backends`` × ``devices`` × ``dtypes``.

    They are checked together as the engine checks a scenario. ``peers``: backends of the other mode
    checked for the comparison only (not returned); ``options``: further keyword arguments of
    ``check_scenario``.
    """

    scenario: str
    backends: list[str]
    devices: list[str]
    dtypes: list[str]
    source: str | None = None
    family: str | None = None
    peers: list[str] = dataclasses.field(default_factory=list)
    options: dict[str, Any] = dataclasses.field(default_factory=dict)
    op: ClassVar[str] = "cells"
    answer: ClassVar[type[Answer]] = CellsReply


Request = ListRequest | WarmRequest | CellsRequest
REQUESTS: dict[str, type[Request]] = {cls.op: cls for cls in (ListRequest, WarmRequest, CellsRequest)}


def request_to_json(request: Request) -> str:
    return json.dumps({"op": request.op, **_fields(request)})


def parse_request(line: bytes | str) -> Request:
    data = json.loads(line)
    if not isinstance(data, dict):
        raise ProtocolError(f"not a request: {str(line)[:200]}")
    op = data.pop("op", None)
    kind = REQUESTS.get(op)
    if kind is None:
        raise ProtocolError(f"unknown request {op!r}")
    try:
        return kind(**data)
    except TypeError as exc:
        raise ProtocolError(f"not a {op!r} request: {exc}") from None
