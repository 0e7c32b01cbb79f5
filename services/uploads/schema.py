"""The body of ``POST /api/uploads``: the cells one CI job checked and the commit they belong to.

A cell is the engine's ``Cell``, its fields, types and vocabularies derived from the contract
(``gradci.services.cell_fields``). A cell the engine could never produce is refused with the field
that is wrong: a status, operator or dtype outside its vocabulary, a device name the engine does not
use, a backend the engine does not know, or one computing with another framework or mode than its own.
A cell may carry its rule-coverage and detection-power records, and the upload the checkout's rules
(``gradci.services.db.record_schema``): an uploaded run shows its rules as a worker's run does.
"""
from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal, TypeAlias

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationInfo,
    field_validator,
    model_validator,
)

from gradci.scenarios.contract.cell import KEY_LENGTHS, OPERATORS, TEXT_FIELDS, InvalidCell, validate_cell
from gradci.scenarios.contract.devices import compared_device, validate_device
from gradci.scenarios.contract.requirements import Requirements
from gradci.services.cell_fields import cell_record
from gradci.services.db.record_schema import MAX_RULES, UploadedPower, UploadedRule, UploadedRuleCoverage
from gradci.services.repo_refs import FULL_NAME
from gradci.services.reports.targets import TargetConfigError, parse_report_config

MAX_INT32 = 2**31 - 1
MAX_CELLS = 1_000_000
MAX_SCENARIOS = 100_000
DEFAULT_SHARD = "default"
SHARD_PATTERN = r"^[A-Za-z0-9_.:+\-]{1,64}$"
FULL_SHA_PATTERN = r"^(?:[0-9a-fA-F]{40}|[0-9a-fA-F]{64})$"
NO_CONTROL_CHARS = r"^[^\x00-\x1f\x7f]*$"

ShardName = Annotated[str, StringConstraints(pattern=SHARD_PATTERN)]
FullSha = Annotated[str, StringConstraints(pattern=FULL_SHA_PATTERN)]
Line = Annotated[str, StringConstraints(min_length=1, max_length=255, pattern=NO_CONTROL_CHARS)]


@functools.cache
def engine_backends() -> dict[str, tuple[str, str]]:
    """Each backend the engine has → its (framework, mode).

    Backends built in or installed here through ``gradci.backends``. Loaded on the first upload: the
    registry loads numpy, which the API does not need to start.
    """
    from gradci.scenarios.backends import registry

    return {name: (backend.framework, backend.mode) for name, backend in registry().items()}


class _CellChecks(BaseModel):
    """What the engine could produce, beyond each field's type: the checks of the cell contract."""

    model_config = ConfigDict(extra="forbid")

    @field_validator("*", mode="after", check_fields=False)
    @classmethod
    def _no_nul(cls, value: Any, info: ValidationInfo) -> Any:
        # PostgreSQL's text holds no NUL: an exception's text may carry one, a name may not.
        if isinstance(value, str) and "\x00" in value:
            if info.field_name in TEXT_FIELDS:
                return value.replace("\x00", "\ufffd")
            raise ValueError("must not contain NUL characters")
        return value

    @field_validator("device", check_fields=False)
    @classmethod
    def _known_device(cls, device: str) -> str:
        validate_device(compared_device(device) or device)
        return device

    @field_validator("backend", check_fields=False)
    @classmethod
    def _known_backend(cls, backend: str) -> str:
        if backend not in engine_backends():
            raise ValueError(f"unknown backend {backend!r}: the engine has {', '.join(engine_backends())} "
                             "(a third-party backend's package must be installed on the server too)")
        return backend

    @model_validator(mode="after")
    def _as_the_engine_makes_it(self) -> _CellChecks:
        fields = self.__dict__
        try:
            validate_cell(fields)
        except InvalidCell as exc:
            raise ValueError(str(exc)) from None
        framework, mode = engine_backends()[fields["backend"]]
        for name, own in (("framework", framework), ("mode", mode)):
            if fields[name] and fields[name] != own:  # an error cell may leave them empty
                raise ValueError(f"cell {fields['scenario']!r}: backend {fields['backend']!r} computes with "
                                 f"{name} {own!r}, not {fields[name]!r}")
        return self


if TYPE_CHECKING:  # built from the cell contract at import: its fields are not spelled out for type checkers
    UploadedCell: TypeAlias = Any
else:
    UploadedCell = cell_record(
        "UploadedCell", _CellChecks, doc="One cell as `gradci check --format json` writes it.",
        **{name: (Annotated[str, StringConstraints(min_length=1, max_length=limit)], ...)
           for name, limit in KEY_LENGTHS.items() if name != "dtype"},
        fingerprint=(Annotated[str, StringConstraints(max_length=64)] | None, None),
        rule_coverage=(UploadedRuleCoverage | None, None),
        power=(UploadedPower | None, None),
    )


class UploadedScenario(BaseModel):
    """A scenario the shard checked, with its fingerprint.

    The pull request's patch coverage covers the scenarios whose fingerprint differs from the base
    run's.
    """

    model_config = ConfigDict(extra="forbid")

    name: Line
    operator: Literal[OPERATORS]  # type: ignore[valid-type]  # the contract's tuple, a Literal of its words
    fingerprint: Annotated[str, StringConstraints(max_length=64)] | None = None
    tags: Annotated[list[Annotated[str, StringConstraints(max_length=255)]], Field(max_length=64)] = []

    @property
    def requirements(self) -> Requirements:  # the catalog's column; an upload has none to route by
        return Requirements()

    # The catalog's definition site: not uploaded (yet), so an uploaded run's check run has no annotations.
    file: ClassVar[str | None] = None
    line: ClassVar[int | None] = None


class UploadHeader(BaseModel):
    """An upload but its scenarios and cells: what deciding whether to accept it needs, read first.

    See ``gradci.services.uploads.stream``: the lists are read item by item once it is accepted.
    """

    model_config = ConfigDict(extra="forbid")

    repository: Annotated[str, StringConstraints(max_length=255, pattern=FULL_NAME.pattern)] = Field(
        description="the GitHub repository, owner/name; the credential must be for it")
    sha: FullSha = Field(description="the commit checked: statuses go on it")
    branch: Line | None = Field(None, description="the branch checked, if any")
    pr: Annotated[int, Field(ge=1, le=MAX_INT32)] | None = Field(None, description="the pull request, if any")
    base_sha: FullSha | None = Field(None, description="the pull request's base commit: the report compares "
                                                       "with that commit's latest finished run")
    shard: ShardName = Field(DEFAULT_SHARD, description="this upload's name among the commit's shards")
    expect_shards: Annotated[list[ShardName], Field(min_length=1, max_length=64)] | None = Field(
        None, description="every shard the run waits for (gradci.toml's [upload] shards); none: this one")
    report: dict[str, Any] | None = Field(None, description="gradci.toml's [report] table: coverage targets")

    @field_validator("sha", "base_sha")
    @classmethod
    def _lower_case(cls, sha: str | None) -> str | None:
        return sha.lower() if sha else sha

    @field_validator("report")
    @classmethod
    def _targets_readable(cls, report: dict[str, Any] | None) -> dict[str, Any] | None:
        try:
            parse_report_config({"report": report})
        except TargetConfigError as exc:
            raise ValueError(str(exc)) from None
        return report

    @model_validator(mode="after")
    def _shard_is_expected(self) -> UploadHeader:
        if self.expect_shards is not None and self.shard not in self.expect_shards:
            raise ValueError(f"shard {self.shard!r} is not among expect_shards {self.expect_shards}")
        return self

    def config(self) -> dict[str, Any]:
        """The run's configuration, as plan_run reads gradci.toml for a checked-out run."""
        return {"report": self.report} if self.report else {}


class UploadIn(UploadHeader):
    """One shard of a commit's results.

    Uploads of one repository and commit make one run; a shard uploaded again replaces its earlier
    cells.
    """

    scenarios: Annotated[list[UploadedScenario], Field(max_length=MAX_SCENARIOS)] = Field(
        default_factory=list, description="the scenarios checked, with their fingerprints (patch coverage)")
    cells: Annotated[list[UploadedCell], Field(min_length=1, max_length=MAX_CELLS)]
    rules: Annotated[list[UploadedRule], Field(max_length=MAX_RULES)] = Field(
        default_factory=list, description="the checkout's derivative rules (`gradci check` records them): the "
                                          "cells' rule_coverage records name them")

    def cell_rows(self) -> list[dict[str, Any]]:
        return [cell.model_dump(exclude={"rule_coverage", "power"}) for cell in self.cells]
