"""Request and response bodies of the REST API (they are also its OpenAPI documentation)."""
from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Any, TypeAlias, TypeVar

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator, model_validator
from pydantic.json_schema import SkipJsonSchema

from gradci.scenarios.contract.matrix import Matrix
from gradci.services.cell_fields import cell_record
from gradci.services.repo_refs import REPO_PATTERN, parse_repo_ref
from gradci.services.repo_urls import without_credentials
from gradci.services.reports.report_record import StatusCounts

ModelT = TypeVar("ModelT", bound=BaseModel)

# PostgreSQL rejects NUL in text and nothing legitimate carries control characters: refuse them
# with a 422 here rather than a database error later.
NO_CONTROL_CHARS = r"^[^\x00-\x1f\x7f]*$"
AxisValue = Annotated[str, StringConstraints(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.:+\-]+$")]
ScenarioGlob = Annotated[str, StringConstraints(min_length=1, max_length=255, pattern=NO_CONTROL_CHARS)]
SHA_PATTERN = r"^[0-9a-fA-F]{7,64}$"
SHA_PREFIX_PATTERN = r"^[0-9a-fA-F]{4,64}$"


class RunCreate(BaseModel):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"dependentRequired": {"sha": ["repo"],
                                                                                       "ref": ["repo"]}})

    # Not nullable in the schema (omit the field instead), so that the schema can say sha and ref need it.
    repo: SkipJsonSchema[None] | Annotated[str, StringConstraints(max_length=2048)] = Field(
        None, json_schema_extra={"pattern": REPO_PATTERN},
        description="git URL (file, https, http, ssh, git), user@host:path, absolute path on the workers' "
        "machine, or GitHub owner/name; omitted: the built-in scenario library"
    )
    sha: SkipJsonSchema[None] | Annotated[str, StringConstraints(pattern=SHA_PATTERN)] = Field(
        None, description="commit to check (needs repo)")
    ref: SkipJsonSchema[None] | Annotated[str, StringConstraints(min_length=1, max_length=255,
                                                                 pattern=NO_CONTROL_CHARS)] = Field(
        None, description="branch or tag to check (needs repo)")
    backends: Annotated[list[AxisValue], Field(min_length=1, max_length=64)] | None = None
    devices: Annotated[list[AxisValue], Field(min_length=1, max_length=64)] | None = None
    dtypes: Annotated[list[AxisValue], Field(min_length=1, max_length=16)] | None = None
    scenarios: ScenarioGlob | Annotated[list[ScenarioGlob], Field(min_length=1, max_length=10_000)] | None = Field(
        None, description="scenario patterns: a glob, or a plain word matching as a substring "
        "(one pattern or a list; the same rule as `gradci check -k` and gradci.toml)"
    )

    repeats: Annotated[int, Field(ge=1, le=100)] | None = Field(
        None, description="compute each derivative this many times and record whether the results were bitwise "
        "reproducible (over gradci.toml's [check] repeats and each scenario's own)")
    timings: bool | None = Field(
        None, description="time each cell's steady state over repeated calls (over gradci.toml's [check] timings; "
        "default: one call, a steady-state time only where the backend compiles)")

    full: bool | None = Field(
        None, description="run every cell: carry nothing from an earlier run of the repository, even where a "
        "cell's inputs are unchanged (docs/affected-cells.md)")

    def options(self) -> dict[str, Any]:
        """The run's options (``Run.options``): the engine's, and ``full``."""
        return {name: value for name, value in (("repeats", self.repeats), ("timings", self.timings),
                                                ("full", self.full or None))
                if value is not None}

    def matrix(self) -> Matrix:
        return Matrix.of(backends=self.backends, devices=self.devices, dtypes=self.dtypes, scenarios=self.scenarios)

    @field_validator("repo")
    @classmethod
    def _repo_is_readable(cls, repo: str | None) -> str | None:
        # The schema's pattern says the same, but this says which form was meant and what is wrong.
        if repo is None:
            return None
        parse_repo_ref(repo, clone_url_template="{full_name}")
        return without_credentials(repo)  # from here on (errors, logs) the request holds no secret

    @model_validator(mode="after")
    def _commit_needs_repository(self) -> RunCreate:
        if self.repo is None and (self.sha is not None or self.ref is not None):
            raise ValueError("sha and ref need a repo (without repo the built-in library runs)")
        if self.sha is not None:
            self.sha = self.sha.lower()
        return self


class RunCreated(BaseModel):
    id: int
    status: str
    url: str


def from_row(model: type[ModelT], row: Any, **computed: Any) -> ModelT:
    """``model`` from a database row's attributes of the same names, plus the computed fields."""
    return model.model_validate({name: getattr(row, name) for name in model.model_fields if name not in computed}
                                | computed)


class CellCounts(StatusCounts):
    """Cells per status, plus jobs waiting and running."""

    queued: int = Field(0, description="jobs waiting for a worker")
    running: int = Field(0, description="jobs being run")


class WaitingOut(BaseModel):
    """A queued job that no online worker would take."""

    job_id: int
    queue: str
    reason: str = Field(description='e.g. "waiting for a cuda worker; none online"')
    since: datetime = Field(description="when the job was stored, or last taken by a worker; after "
                                        "GRADCI_DEVICE_WAIT seconds its cells become skip with the reason")


class RerunOut(BaseModel):
    scenario: str
    backend: str
    device: str
    reason: str


class CarryOut(BaseModel):
    """What the run carried from an earlier run instead of re-running it (docs/affected-cells.md)."""

    carried: int = Field(0, description="cells carried, counted in coverage like fresh ones")
    base_run_id: int | None = Field(None, description="the run they were carried from (null: no base run)")
    base_sha: str | None = None
    rerun: int = Field(0, description="groups (scenario, backend, device) re-run")
    reasons: list[RerunOut] = Field(default_factory=list, description="why groups re-ran: the first ones")
    full: str | None = Field(None, description="why the run ran every cell (null: it carried what it could)")


class RunOut(BaseModel):
    id: int
    status: str
    url: str
    repo: str | None = Field(description="repository URL; null for the built-in library")
    repo_full_name: str | None
    head_sha: str | None
    base_sha: str | None
    ref: str | None
    pr_number: int | None
    trigger: str
    parent_run_id: int | None
    matrix: dict[str, Any]
    options: dict[str, Any] = Field(default_factory=dict, description="engine options, such as repeats")
    cancel_requested: bool
    counts: CellCounts
    omitted_cells: int = Field(0, description="cells not made: backends of a framework a scenario gives no f for "
                                              "(a torch-only scenario has no jax cells), or that compute no such "
                                              "operator (second-order-only backends); counted, never listed")
    waiting: list[WaitingOut] = Field(default_factory=list,
                                      description="jobs waiting for a device no online worker offers")
    coverage: float | None = Field(description="pass / (pass + fail + error) × 100; null before any counted cell")
    error_message: str | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    carry: CarryOut | None = Field(None, description="what the run carried from its base run; null: not planned yet")


class RunsPage(BaseModel):
    items: list[RunOut]
    next_cursor: str | None


class _StoredCell(BaseModel):
    """Where the service stored a cell: its row, and the job that made it (None: an upload's)."""

    model_config = ConfigDict(from_attributes=True)

    id: int
    job_id: int | None
    carried_run_id: int | None = Field(None, description="a carried cell: the run that computed it (null: computed "
                                                         "by this run)")
    carried_sha: str | None = Field(None, description="a carried cell: the commit it was computed at")
    carried_reason: str | None = Field(None, description='a carried cell: why it was not re-run ("inputs unchanged")')


# A stored cell: the engine's Cell, plus where and when the service stored it.
if TYPE_CHECKING:  # built from the cell contract at import: its fields are not spelled out for type checkers
    CellOut: TypeAlias = Any
else:
    CellOut = cell_record("CellOut", _StoredCell, required=True, fingerprint=(str | None, ...),
                          created_at=(datetime, ...))


class ResultsPage(BaseModel):
    items: list[CellOut]
    next_cursor: str | None


class WorkerOut(BaseModel):
    name: str
    host: str
    device: str
    queue: str
    versions: dict[str, Any]
    started_at: datetime
    last_heartbeat: datetime
    online: bool


class ComponentHealth(BaseModel):
    ok: bool
    error: str | None = None


class BrokerHealth(ComponentHealth):
    queued_plans: int | None = Field(None, description="messages waiting on the cpu queue: plans and CPU jobs")


class Health(BaseModel):
    status: str = Field(description='"ok", or "unavailable" when the database or the broker is down')
    database: ComponentHealth
    broker: BrokerHealth
    workers_online: dict[str, int] = Field(description="workers that sent a heartbeat within the window, per device")


class RepositoryOptionsOut(BaseModel):
    """A repository's options: what its runs do beyond checking its cells."""

    repository: str = Field(description="GitHub owner/name, lower-cased as GitHub compares names")
    power: bool = Field(description="each push to the default branch measures detection power "
                        "(docs/detection-power.md); pull requests never do")


class RepositoryOptionsChange(BaseModel):
    """The options to change; an option left out keeps its value."""

    model_config = ConfigDict(extra="forbid", strict=True)  # strict: "yes" or 1 is no answer to on or off

    power: SkipJsonSchema[None] | bool = Field(None, description="measure detection power on the default branch")
