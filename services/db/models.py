"""The database schema as SQLAlchemy 2 typed models.

``migrations/versions`` must build the same tables; ``tests/services/test_db.py`` compares the two.
"""
from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated, Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    CheckConstraint,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Text,
    TypeDecorator,
    UniqueConstraint,
    false,
    func,
    select,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column, relationship

from gradci.scenarios.contract.cell import FIELDS as CELL_FIELDS
from gradci.scenarios.contract.cell import (
    FLOAT_FIELDS,
    INT_FIELDS,
    KEY_LENGTHS,
    TEXT_FIELDS,
    VOCABULARIES,
    Status,
    Vocabulary,
    stored_values,
)
from gradci.scenarios.contract.cell import KEY_FIELDS as CELL_KEY_FIELDS

# Deterministic constraint names, so later migrations can alter them (SQLite batch mode needs names).
NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

JSONType = JSON().with_variant(JSONB(), "postgresql")
# SQLite has no 64-bit autoincrement other than its INTEGER rowid.
BigIntId = BigInteger().with_variant(Integer(), "sqlite")
# The column of a row that belongs to a run and is deleted with it.
OfRun = Annotated[int, mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))]


class RunStatus(Vocabulary):
    queued = "queued"
    running = "running"
    passed = "passed"
    failed = "failed"
    cancelled = "cancelled"
    error = "error"
    skipped = "skipped"  # finished, and nothing was checked: every cell skipped (no device, every scenario skipped)


FINISHED_RUN_STATUSES = frozenset({RunStatus.passed, RunStatus.failed, RunStatus.cancelled, RunStatus.error,
                                   RunStatus.skipped})
FINISHED_RUN_VALUES = tuple(sorted(status.value for status in FINISHED_RUN_STATUSES))  # for SQL's IN


class JobStatus(Vocabulary):
    queued = "queued"
    running = "running"
    done = "done"
    error = "error"
    cancelled = "cancelled"


# A cell's status is the engine's own vocabulary (query parameters, OpenAPI, stored values).
CellStatus = Status


class Trigger(Vocabulary):
    api = "api"
    webhook = "webhook"
    push = "push"
    rerun = "rerun"
    demo = "demo"
    upload = "upload"  # cells checked by the project's own CI and uploaded (POST /api/uploads)


def utcnow() -> datetime:
    return datetime.now(UTC)


def database_now(session: Session) -> datetime:
    """The database server's clock, the one clock every host shares.

    Leases and heartbeats are written and judged by it, so that a worker on a machine whose clock is
    minutes off neither takes back live jobs nor loses its own. The embedded SQLite database has every
    process on one machine: its clock is theirs.
    """
    if session.get_bind().dialect.name == "sqlite":
        return utcnow()
    now = session.scalar(select(func.clock_timestamp()))
    assert isinstance(now, datetime)
    return now


class UTCDateTime(TypeDecorator[datetime]):
    """Timezone-aware UTC datetimes on every backend.

    SQLite stores naive ones and returns them naive, which would make comparisons with ``utcnow()``
    raise.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is not None and value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        return value


def status_check(column: str, values: tuple[str, ...]) -> CheckConstraint:
    allowed = ", ".join(f"'{value}'" for value in values)
    return CheckConstraint(f"{column} IN ({allowed})", name=column)


# Widths of the cell's string columns: its key fields' from the contract; vocabulary names are short.
CELL_STRING_WIDTHS = {**KEY_LENGTHS, "status": 16, "operator": 32, "framework": 32, "mode": 32}


def cell_vocabulary_checks() -> list[CheckConstraint]:
    """The results table's constraints, from ``gradci.scenarios.contract.cell.VOCABULARIES``.

    The database refuses what the engine could never produce (an errored cell may leave some fields
    empty, as ingestion allows). Changing a vocabulary needs a migration (0003 shows how).
    """
    return [status_check(field, stored_values(field)) for field in VOCABULARIES]


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map = {datetime: UTCDateTime, dict[str, Any]: JSONType, list[str]: JSONType}


class Repository(Base):
    __tablename__ = "repositories"

    id: Mapped[int] = mapped_column(primary_key=True)
    url: Mapped[str] = mapped_column(String(2048), unique=True)
    full_name: Mapped[str | None] = mapped_column(String(255))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    # App mode: the installation of gradci's GitHub App its webhooks came from (its token reports).
    github_installation_id: Mapped[int | None] = mapped_column(BigInteger)


class Run(Base):
    __tablename__ = "runs"
    __table_args__ = (
        status_check("status", RunStatus.values()),
        status_check("trigger", Trigger.values()),
        Index(None, "repository_id", "id"),
        Index(None, "head_sha"),
        Index(None, "pr_number"),
        Index(None, "status"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    # None: the built-in scenario library.
    repository_id: Mapped[int | None] = mapped_column(ForeignKey("repositories.id"))
    head_sha: Mapped[str | None] = mapped_column(String(64))
    base_sha: Mapped[str | None] = mapped_column(String(64))
    ref: Mapped[str | None] = mapped_column(String(255))
    pr_number: Mapped[int | None]
    status: Mapped[str] = mapped_column(String(16), default=RunStatus.queued.value)
    # {"backends": [..]|None, "devices": [..]|None, "dtypes": [..]|None, "scenarios": glob|[globs]|None};
    # None means "everything the repository's configuration enables".
    matrix: Mapped[dict[str, Any]] = mapped_column(default=dict)
    trigger: Mapped[str] = mapped_column(String(16), default=Trigger.api.value)
    parent_run_id: Mapped[int | None] = mapped_column(ForeignKey("runs.id", ondelete="SET NULL"))
    cancel_requested: Mapped[bool] = mapped_column(Boolean, default=False)
    coverage: Mapped[float | None] = mapped_column(Float)
    error_message: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    started_at: Mapped[datetime | None]
    finished_at: Mapped[datetime | None]

    # The repository's gradci.toml as plan_run read it at head_sha: report targets live there.
    config: Mapped[dict[str, Any]] = mapped_column(default=dict)
    # The engine's options for every cell of the run ({"repeats": 3}): over the repository's gradci.toml.
    options: Mapped[dict[str, Any]] = mapped_column(default=dict)
    # Cells the plan did not make: backends of a framework a scenario gives no f for (a torch-only
    # rule has no jax cells). Counted in the run's summary, never listed as skips.
    omitted_cells: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    # What plan_run carried from a base run (gradci.services.db.dependencies.CarrySummary.to_dict):
    # the base, how many cells were carried, how many re-ran and the first reasons; or why the run was
    # full. None: planned before 0020, or never planned.
    carry: Mapped[dict[str, Any] | None] = mapped_column(JSONType, nullable=True)

    repository: Mapped[Repository | None] = relationship(lazy="joined")


class Job(Base):
    __tablename__ = "jobs"
    # (status, queued_at): the reconciler's look for jobs waiting too long or no longer renewed.
    __table_args__ = (status_check("status", JobStatus.values()), Index(None, "run_id", "status"),
                      Index(None, "status", "queued_at"))

    id: Mapped[int] = mapped_column(primary_key=True)
    run_id: Mapped[OfRun]
    backend: Mapped[str] = mapped_column(String(64))
    device: Mapped[str] = mapped_column(String(32))
    queue: Mapped[str] = mapped_column(String(64))
    scenarios: Mapped[list[str]] = mapped_column(default=list)
    status: Mapped[str] = mapped_column(String(16), default=JobStatus.queued.value)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    worker: Mapped[str | None] = mapped_column(String(255))
    message: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    started_at: Mapped[datetime | None]
    finished_at: Mapped[datetime | None]
    # When the job last entered its queue (stored, or sent again): the reconciler's grace counts from it.
    queued_at: Mapped[datetime] = mapped_column(default=utcnow)
    # The broker delivery (Celery task id) that holds the job while it runs, and that delivery's lease,
    # renewed while it runs: a second delivery of a job whose lease is fresh is a duplicate.
    delivery: Mapped[str | None] = mapped_column(String(64))
    lease_renewed_at: Mapped[datetime | None]
    # The device record of the worker that ran the job (worker.devices.device_record): the GPU model,
    # driver, CUDA and framework versions that produced its cells.
    device_record: Mapped[dict[str, Any] | None] = mapped_column(nullable=True)


def cell_column(name: str) -> Any:
    """The column that stores one ``gradci.scenarios.contract.cell.Cell`` field.

    Its numbers as nullable floats or integers, its key fields as strings of the contract's widths, its
    message and warnings as text.
    """
    if name in FLOAT_FIELDS:
        return mapped_column(Float, nullable=True)
    if name in INT_FIELDS:
        return mapped_column(BigInteger, nullable=True)
    if name in TEXT_FIELDS:
        return mapped_column(Text, nullable=False, default="")
    return mapped_column(String(CELL_STRING_WIDTHS[name]), nullable=False)


class Result(Base):
    """One checked cell. The unique key is what makes a redelivered job's writes idempotent."""

    __tablename__ = "results"
    __table_args__ = (
        UniqueConstraint("run_id", *CELL_KEY_FIELDS),
        *cell_vocabulary_checks(),
        Index(None, "run_id", "id"),  # cursor pagination within a run
        Index(None, "run_id", "status", "id"),  # counts per status, status-filtered pages
        Index(None, "scenario", "run_id"),  # a scenario's history: its last runs, newest first
        Index(None, "job_id"),
    )

    id: Mapped[int] = mapped_column(BigIntId, primary_key=True)
    run_id: Mapped[OfRun]
    job_id: Mapped[int | None] = mapped_column(ForeignKey("jobs.id", ondelete="SET NULL"))
    # One column per scenarios.cell.Cell field, in its order (a class body is a namespace: the
    # columns exist before the constraints above are bound to the table).
    locals().update({field.name: cell_column(field.name) for field in CELL_FIELDS})
    if TYPE_CHECKING:  # the same columns, spelled out for type checkers (tests/test_typed_seams.py keeps them in step)
        scenario: Mapped[str]
        operator: Mapped[str]
        framework: Mapped[str]
        backend: Mapped[str]
        mode: Mapped[str]
        device: Mapped[str]
        dtype: Mapped[str]
        status: Mapped[str]
        max_abs_err: Mapped[float | None]
        max_rel_err: Mapped[float | None]
        atol: Mapped[float | None]
        rtol: Mapped[float | None]
        time_ms: Mapped[float | None]
        first_call_ms: Mapped[float | None]
        peak_memory_bytes: Mapped[int | None]
        message: Mapped[str]
        warnings: Mapped[str]
        reference: Mapped[str]
        reference_error: Mapped[float | None]
        precision: Mapped[str]
        repeat_spread: Mapped[float | None]
        reference_ms: Mapped[float | None]
        import_ms: Mapped[float | None]
        detail: Mapped[str]
    fingerprint: Mapped[str | None] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    # The upload shard that brought the cell (UploadShard.id; None: a worker's job): uploading the
    # shard again replaces these. No foreign key: its check would scan this table per deleted shard.
    shard_id: Mapped[int | None] = mapped_column(Integer)
    # What the cell depended on (DependencyRecord.digest; None: nothing recorded, so never carried).
    depends_digest: Mapped[str | None] = mapped_column(String(64))
    # A cell carried from an earlier run: where it was computed (the run, its commit) and why it was
    # not re-run. No foreign key on the run: the provenance outlives a deleted run, as text does.
    carried_run_id: Mapped[int | None] = mapped_column(Integer)
    carried_sha: Mapped[str | None] = mapped_column(String(64))
    carried_reason: Mapped[str | None] = mapped_column(String(255))


class DependencyRecord(Base):
    """What a cell depended on (gradci.scenarios.affected), stored once per distinct record.

    Content-addressed: the cells of one scenario usually share one record, and a carried cell keeps its
    base's. Never deleted with a run (a later run's carried cells may still name it).
    """

    __tablename__ = "dependency_records"

    digest: Mapped[str] = mapped_column(String(64), primary_key=True)
    record: Mapped[dict[str, Any]] = mapped_column(JSONType)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class CarriedReference(Base):
    """A scenario's finite-difference reference as a trusted run computed it, for later runs to reuse.

    Written only from default-branch pushes (``gradci.worker.sources.trusted_run``): a pull request's
    code never writes what another run reads. ``payload`` is the runner's own encoding, opaque here (no
    server process decodes it; only a runner, inside its box, does). A later run's job offers it to its
    runner when nothing the reference's computation read changed (``depends_digest``'s record: the
    code it ran, the files it read, the environment) and the runner finds the same ``cache_key``.
    """

    __tablename__ = "carried_references"
    __table_args__ = (UniqueConstraint("repository_id", "cache_key", "depends_digest"),
                      Index(None, "repository_id", "scenario"))

    id: Mapped[int] = mapped_column(primary_key=True)
    repository_id: Mapped[int] = mapped_column(ForeignKey("repositories.id"))
    scenario: Mapped[str] = mapped_column(String(255))
    cache_key: Mapped[str] = mapped_column(Text)
    depends_digest: Mapped[str] = mapped_column(String(64))
    payload: Mapped[bytes] = mapped_column(LargeBinary)
    run_id: Mapped[int] = mapped_column(Integer)
    sha: Mapped[str | None] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class ScenarioCatalogEntry(Base):
    """The scenarios a run's checkout declared, for patch coverage (which ones the PR added or changed)."""

    __tablename__ = "scenario_catalog"
    __table_args__ = (UniqueConstraint("run_id", "name"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    run_id: Mapped[OfRun]
    name: Mapped[str] = mapped_column(String(255))
    operator: Mapped[str] = mapped_column(String(32))
    fingerprint: Mapped[str | None] = mapped_column(String(64))
    tags: Mapped[list[str]] = mapped_column(default=list)
    # What a device must offer to run it (scenarios.requirements.Requirements as a dict; {}: anything).
    requirements: Mapped[dict[str, Any]] = mapped_column(default=dict)
    # Where its Scenario(...) call is, relative to the repository (None: outside it, or before 0014):
    # a check run's annotation of its failures points there.
    file: Mapped[str | None] = mapped_column(String(1024))
    line: Mapped[int | None] = mapped_column(Integer)


class RuleCatalogEntry(Base):
    """A derivative rule a run's checkout defines (``gradci.scenarios.rules.discovery.Rule``).

    ``methods``: each method's name, file, first line, lines, source digest (a pull request changed the
    rule where a digest differs from its base run's) and source text (the dashboard shows it: the service
    keeps no checkout).
    """

    __tablename__ = "rule_catalog"
    __table_args__ = (UniqueConstraint("run_id", "rule_id"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    run_id: Mapped[OfRun]
    rule_id: Mapped[str] = mapped_column(String(1024))  # "file::qualified name"
    kind: Mapped[str] = mapped_column(String(64))
    name: Mapped[str] = mapped_column(String(512))
    file: Mapped[str] = mapped_column(String(1024))
    methods: Mapped[list[dict[str, Any]]] = mapped_column(JSONType, default=list)


class RuleReach(Base):
    """A cell that ran a method of a rule: a rule's coverage matrix (backend × operator) is made of these.

    Keyed by the cell and the method, so that a redelivered job adds nothing twice.
    """

    __tablename__ = "rule_reach"
    # Named: the conventional name is over PostgreSQL's 63 characters.
    __table_args__ = (UniqueConstraint("run_id", "rule_id", "method", "scenario", "backend", "device", "dtype",
                                       name="uq_rule_reach_cell"),)

    id: Mapped[int] = mapped_column(BigIntId, primary_key=True)
    run_id: Mapped[OfRun]
    rule_id: Mapped[str] = mapped_column(String(1024))
    method: Mapped[str] = mapped_column(String(32))
    scenario: Mapped[str] = mapped_column(String(KEY_LENGTHS["scenario"]))
    backend: Mapped[str] = mapped_column(String(KEY_LENGTHS["backend"]))
    operator: Mapped[str] = mapped_column(String(32))
    mode: Mapped[str] = mapped_column(String(32))
    device: Mapped[str] = mapped_column(String(KEY_LENGTHS["device"]))
    dtype: Mapped[str] = mapped_column(String(KEY_LENGTHS["dtype"]))


class CoveredLines(Base):
    """The lines of one file of the checkout that a part of a run's cells ran (a job's, or an upload shard's).

    Each part rewrites its own row as its cells come; a file's covered lines are the union of its parts'.
    """

    __tablename__ = "covered_lines"
    __table_args__ = (UniqueConstraint("run_id", "part", "file"),)

    id: Mapped[int] = mapped_column(BigIntId, primary_key=True)
    run_id: Mapped[OfRun]
    part: Mapped[str] = mapped_column(String(64))  # "job 12"
    file: Mapped[str] = mapped_column(String(1024))
    lines: Mapped[list[int]] = mapped_column(JSONType, default=list)


class CellPower(Base):
    """A cell's detection power (``gradci.scenarios.rules.power.CellPower.to_dict``), beside its verdict.

    Which errors planted in the rules the cell reached it caught, the smallest δ of a scaled output it
    caught (``smallest_delta``, also a column so that a run's cells sort by it), and what it missed.
    Keyed like the cell, so that a redelivered job or a shard uploaded again rewrites it.
    """

    __tablename__ = "cell_power"
    __table_args__ = (UniqueConstraint("run_id", *CELL_KEY_FIELDS),)

    id: Mapped[int] = mapped_column(BigIntId, primary_key=True)
    run_id: Mapped[OfRun]
    scenario: Mapped[str] = mapped_column(String(KEY_LENGTHS["scenario"]))
    backend: Mapped[str] = mapped_column(String(KEY_LENGTHS["backend"]))
    device: Mapped[str] = mapped_column(String(KEY_LENGTHS["device"]))
    dtype: Mapped[str] = mapped_column(String(KEY_LENGTHS["dtype"]))
    smallest_delta: Mapped[float | None] = mapped_column(Float, nullable=True)
    record: Mapped[dict[str, Any]] = mapped_column(JSONType)


class RepositoryOptions(Base):
    """What the operator turned on for one repository (``gradci repos power``), by its lower-cased owner/name.

    ``power``: its default branch's push runs measure detection power (pull requests never do: it
    re-runs every cell that reached a rule, many times).
    """

    __tablename__ = "repository_options"

    id: Mapped[int] = mapped_column(primary_key=True)
    full_name: Mapped[str] = mapped_column(String(200), unique=True)
    power: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)


class Delivery(Base):
    """A GitHub webhook delivery to act on, stored (one statement) before it is acknowledged.

    The unique id deduplicates redeliveries. A worker acts on it once: ``processed_at`` is set in the
    transaction that stores its runs, and ``outcome`` says what it did.
    """

    __tablename__ = "deliveries"
    # The reconciler's question (unprocessed ones) and a worker's (the unprocessed ones of a subject).
    __table_args__ = (Index(None, "processed_at", "subject"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    delivery_id: Mapped[str] = mapped_column(String(64), unique=True)
    event: Mapped[str] = mapped_column(String(64))
    action: Mapped[str | None] = mapped_column(String(64))
    payload: Mapped[dict[str, Any]] = mapped_column(default=dict)
    received_at: Mapped[datetime] = mapped_column(default=utcnow)
    run_id: Mapped[int | None] = mapped_column(ForeignKey("runs.id", ondelete="SET NULL"))
    # What the request decided from the payload (gradci.services.github.events.Decision's fields);
    # None for deliveries stored before 0013, all of them processed.
    decision: Mapped[dict[str, Any] | None]
    # The pull request it concerns ("owner/name#number"): its deliveries are acted on in stored order.
    subject: Mapped[str | None] = mapped_column(String(320))
    processed_at: Mapped[datetime | None]
    outcome: Mapped[dict[str, Any] | None]  # the runs it started and cancelled, or why it started none


class Worker(Base):
    __tablename__ = "workers"
    __table_args__ = (Index(None, "last_heartbeat"),)

    name: Mapped[str] = mapped_column(String(255), primary_key=True)
    host: Mapped[str] = mapped_column(String(255))
    device: Mapped[str] = mapped_column(String(32))
    queue: Mapped[str] = mapped_column(String(64))
    versions: Mapped[dict[str, Any]] = mapped_column(default=dict)
    started_at: Mapped[datetime] = mapped_column(default=utcnow)
    last_heartbeat: Mapped[datetime] = mapped_column(default=utcnow)


class ReportState(Vocabulary):
    pending = "pending"        # something to publish (or republish) to GitHub
    published = "published"    # the latest state is on GitHub
    failed = "failed"          # GitHub refused for good (4xx); the message says why


class GitHubReport(Base):
    """What gradci owes GitHub for a pull-request or baseline run: statuses and the PR comment.

    Written before anything is sent, so a GitHub outage delays the report but never loses it: a
    pending row is sent again by the sweeper, with exponential backoff, until it is published.
    """

    __tablename__ = "github_reports"
    __table_args__ = (status_check("state", ReportState.values()), Index(None, "state"))

    run_id: Mapped[OfRun] = mapped_column(primary_key=True)
    full_name: Mapped[str] = mapped_column(String(255))
    state: Mapped[str] = mapped_column(String(16), default=ReportState.pending.value)
    published_phase: Mapped[str | None] = mapped_column(String(16))  # "pending" or "final" statuses sent
    attempts: Mapped[int] = mapped_column(Integer, default=0)  # since the last successful publication
    last_error: Mapped[str | None] = mapped_column(Text)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)
    # When the sweeper may send a pending report again (exponential backoff over attempts); None: not
    # yet attempted, due once it has been pending for the backoff's base.
    next_attempt_at: Mapped[datetime | None]
    check_run_id: Mapped[int | None] = mapped_column(BigInteger)  # App mode: the run's check run on GitHub
    # While the run runs: when its failures so far were last shown on GitHub, and how many times
    # (``gradci.services.github.progress``: rate-limited per run).
    progress_at: Mapped[datetime | None]
    progress_updates: Mapped[int] = mapped_column(Integer, default=0, server_default="0")


class StoredReport(Base):
    """A finished run's report, computed once when the run (or its base run) is finalised.

    Reading it is one row however many cells the run has, on every API process.
    """

    __tablename__ = "run_reports"

    run_id: Mapped[OfRun] = mapped_column(primary_key=True)
    base_run_id: Mapped[int | None] = mapped_column(Integer)  # the base it was compared with, if any
    report: Mapped[dict[str, Any]]
    computed_at: Mapped[datetime] = mapped_column(default=utcnow)
    # The dashboard's unfiltered matrix layout (services.reports.matrix): its scenarios in page order
    # and its axes, which a first view would otherwise read every cell for. None: stored before 0007.
    matrix_layout: Mapped[dict[str, Any] | None]
    # The run's whole JUnit document, gzipped, rendered once its cells are final (None: rendered
    # before 0012, or not yet); deferred: reading the report never loads it.
    junit_gz: Mapped[bytes | None] = mapped_column(LargeBinary, deferred=True)


class Upload(Base):
    """The run of one repository at one commit that the project's own CI uploads cells to, shard by shard.

    It is open until ``closed_at``: set once, by a conditional update, when the last expected shard
    arrives or ``deadline`` passes — whoever sets it sends the run's one finalisation.
    """

    __tablename__ = "uploads"
    __table_args__ = (UniqueConstraint("repository_id", "head_sha"), Index(None, "closed_at", "deadline"))

    run_id: Mapped[OfRun] = mapped_column(primary_key=True)
    repository_id: Mapped[int] = mapped_column(ForeignKey("repositories.id"))
    head_sha: Mapped[str] = mapped_column(String(64))
    # The shard names to wait for (empty: only the first upload's shard).
    expected_shards: Mapped[list[str]] = mapped_column(default=list)
    first_upload_at: Mapped[datetime] = mapped_column(default=utcnow)
    deadline: Mapped[datetime]  # first upload + GRADCI_UPLOAD_WAIT: then it finishes with what it has
    closed_at: Mapped[datetime | None]


class UploadShard(Base):
    """One shard of an upload (a CI job's cells): uploading it again replaces its cells."""

    __tablename__ = "upload_shards"
    __table_args__ = (UniqueConstraint("run_id", "name"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("uploads.run_id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(64))
    cells: Mapped[int] = mapped_column(Integer, default=0)
    times_uploaded: Mapped[int] = mapped_column(Integer, default=1)
    received_at: Mapped[datetime] = mapped_column(default=utcnow)


class UploadToken(Base):
    """A bearer token that may upload cells of one repository.

    Only its SHA-256 is stored; its first characters (``prefix``) find the row and tell tokens apart in
    ``gradci tokens list``.
    """

    __tablename__ = "upload_tokens"
    __table_args__ = (Index(None, "prefix"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    full_name: Mapped[str] = mapped_column(String(255))  # owner/name
    prefix: Mapped[str] = mapped_column(String(16))
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    last_used_at: Mapped[datetime | None]
    revoked_at: Mapped[datetime | None]


class ReadToken(Base):
    """A bearer token that may read the runs of some repositories, for programs and private badges.

    ``repositories``: their owner/names. Stored as upload tokens are: its SHA-256, and a prefix to find
    it.
    """

    __tablename__ = "read_tokens"
    __table_args__ = (Index(None, "prefix"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    repositories: Mapped[list[str]] = mapped_column(JSONType)
    prefix: Mapped[str] = mapped_column(String(24))
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    revoked_at: Mapped[datetime | None]


class RegisteredRepository(Base):
    """A GitHub repository the operator registered (``gradci repos add``).

    Its App installation's pull requests run and its CI's id tokens upload, as those
    GRADCI_ALLOWED_REPOS names do. ``full_name`` is lower-cased, as GitHub compares names.
    """

    __tablename__ = "registered_repositories"

    id: Mapped[int] = mapped_column(primary_key=True)
    full_name: Mapped[str] = mapped_column(String(200), unique=True)
    added_at: Mapped[datetime] = mapped_column(default=utcnow)
