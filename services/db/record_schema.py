"""The records the store takes beside cells: each cell's rule coverage and detection power, and the rules.

The same records a runner sends the worker (``gradci.scenarios.rules.records``,
``gradci.scenarios.rules.power``, ``Rule.to_dict`` with each method's source), as an upload brings them
from anyone holding an upload credential, and as a runner that ran hostile code answers them (the
worker holds a power record to this too): every field is typed, bounded and closed (unknown keys refused), names are
paths inside the checkout and methods are the engine's words, and the summary fields of a power record
(its smallest δ, its missed lines) are recomputed from its plants rather than taken as sent. Each
item is also bounded whole by the stream's ``MAX_ITEM_BYTES``.
"""
from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator, model_validator

from gradci.scenarios.rules.discovery import KINDS, METHODS
from gradci.scenarios.rules.power import CAUGHT, DROP, ERROR, MISSED, NO_OP, NOT_PLANTED, SCALE, SIGN, TRANSPOSE
from gradci.scenarios.rules.power import CellPower as CellPowerRecord

MAX_RULES = 10_000  # rules in one upload's catalog
MAX_FILES = 2_000  # files of one cell's covered lines
MAX_REACHED = 1_000  # rules one cell reached
MAX_PLANTS = 1_000  # plants in one cell's power record
MAX_METHODS = 16
MAX_LINE = 10_000_000
SOURCE_LIMIT = 20_000  # characters of one method's source (the runner keeps as many)
# A rule's methods as discovery names them (``METHODS``): torch.autograd.Function's, jax's fun/fwd/bwd/jvp,
# a custom op's, the functions handed to jax.lax's solvers.
NO_CONTROL_CHARS = r"^[^\x00-\x1f\x7f]*$"

Method = Literal[METHODS]  # type: ignore[valid-type]  # a tuple of words, a Literal of them
Kind = Literal[KINDS]  # type: ignore[valid-type]
Text = Annotated[str, StringConstraints(max_length=1000, pattern=NO_CONTROL_CHARS)]
RuleName = Annotated[str, StringConstraints(min_length=1, max_length=512, pattern=NO_CONTROL_CHARS)]
RuleId = Annotated[str, StringConstraints(min_length=4, max_length=1024, pattern=NO_CONTROL_CHARS)]
LineNumber = Annotated[int, Field(ge=1, le=MAX_LINE)]
Delta = Annotated[float, Field(gt=0, le=1)]


def _inside_checkout(path: str) -> str:
    """A file relative to the checkout's root, with forward slashes: as the engine names it."""
    parts = path.split("/")
    if path.startswith("/") or "\\" in path or any(part in ("", ".", "..") for part in parts):
        raise ValueError(f"{path[:80]!r} is not a path inside the checkout (relative, forward slashes, no '..')")
    return path


FilePath = Annotated[str, StringConstraints(min_length=1, max_length=1024, pattern=NO_CONTROL_CHARS)]


class _Closed(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=False)


class UploadedRuleCoverage(_Closed):
    """One cell's rule coverage: the methods of each rule it ran, and the checkout's lines it ran."""

    rules: Annotated[dict[RuleId, Annotated[list[Method], Field(max_length=MAX_METHODS)]],
                     Field(max_length=MAX_REACHED)] = {}
    lines: Annotated[dict[FilePath, Annotated[list[LineNumber], Field(max_length=100_000)]],
                     Field(max_length=MAX_FILES)] = {}

    @field_validator("lines")
    @classmethod
    def _files_inside(cls, lines: dict[str, list[int]]) -> dict[str, list[int]]:
        for path in lines:
            _inside_checkout(path)
        return lines


class UploadedPlant(_Closed):
    """One perturbation of one output of a rule's method, as the cell saw it (``PlantResult``)."""

    rule: RuleId
    method: Method
    output: Annotated[int, Field(ge=0, le=1023)]
    outputs: Annotated[int, Field(ge=0, le=1024)]
    kind: Literal[SCALE, SIGN, DROP, TRANSPOSE]  # type: ignore[valid-type]
    outcome: Literal[CAUGHT, MISSED, NO_OP, NOT_PLANTED, ERROR]  # type: ignore[valid-type]
    smallest_delta: Delta | None = None
    missed_delta: Delta | None = None
    note: Text = ""
    stopped_delta: Delta | None = None  # the δ at which the cell raised under the plant (the ladder stopped)


class UploadedPower(_Closed):
    """One cell's detection power (``CellPower.to_dict``); ``smallest_delta`` and ``missed`` are recomputed."""

    plants: Annotated[list[UploadedPlant], Field(max_length=MAX_PLANTS)] = []
    smallest_delta: Delta | None = None
    missed: Annotated[list[Text], Field(max_length=MAX_PLANTS)] = []
    raised: Annotated[list[Text], Field(max_length=MAX_PLANTS)] = []
    not_measured: Text | None = None

    def record(self) -> dict[str, Any]:
        """The record as the service keeps it: its summary fields the engine's, from its plants."""
        return CellPowerRecord.from_dict(self.model_dump()).to_dict()


class UploadedRuleMethod(_Closed):
    name: Method
    file: FilePath
    first_line: LineNumber
    lines: Annotated[list[LineNumber], Field(max_length=100_000)]
    digest: Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{0,64}$")] = ""
    source: Annotated[str, StringConstraints(max_length=SOURCE_LIMIT)] = ""
    inherited: bool = False  # a base class's method: it counts only where the subclass's own ran

    @field_validator("file")
    @classmethod
    def _inside(cls, path: str) -> str:
        return _inside_checkout(path)

    @field_validator("source")
    @classmethod
    def _no_nul(cls, source: str) -> str:
        return source.replace("\x00", "\ufffd")  # PostgreSQL's JSON text holds no NUL


class UploadedRule(_Closed):
    """A derivative rule of the checkout (``Rule.to_dict``; each method perhaps with its source)."""

    id: RuleId | None = None
    kind: Kind
    name: RuleName
    file: FilePath
    methods: Annotated[list[UploadedRuleMethod], Field(min_length=1, max_length=MAX_METHODS)]

    @field_validator("file")
    @classmethod
    def _inside(cls, path: str) -> str:
        return _inside_checkout(path)

    @model_validator(mode="after")
    def _its_id(self) -> UploadedRule:
        own = f"{self.file}::{self.name}"
        if self.id is not None and self.id != own:
            raise ValueError(f"a rule's id is its file::name ({own[:200]!r}), not {self.id[:200]!r}")
        self.id = own
        return self

    def entry(self) -> dict[str, Any]:
        return self.model_dump()
