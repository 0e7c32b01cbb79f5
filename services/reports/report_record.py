"""The run report as one typed record.

The pull-request comment, the commit statuses, the dashboard and ``GET /api/runs/{id}/report`` all
read this, by attribute. ``pr_report.build_report`` builds it whole.

Records are frozen: a report is a statement about stored results, never edited after it is built.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

from pydantic import BaseModel, ConfigDict, Field

from gradci.scenarios.contract.cell import STATUSES, status_attribute
from gradci.scenarios.contract.coverage import MISSING, counted_cells, coverage_percent, status_counts, status_tally
from gradci.services.cell_fields import cell_record
from gradci.services.reports.targets import CoverageState

# The engine's status vocabulary: checked on construction and listed in the OpenAPI schema.
CellStatusName = Literal[STATUSES]  # type: ignore[valid-type]  # the words of Status, computed: a Literal mypy cannot read
# The most entries any list of a report holds (changed cells, a group's missing cells, changed
# scenarios): a run of a million cells must not make a report of a million lines. Counts say how many
# there are in all.
LIST_LIMIT = 50


class Record(BaseModel):
    # Every key is always in the JSON, defaulted or not: the OpenAPI schema says so.
    model_config = ConfigDict(frozen=True, extra="forbid", json_schema_serialization_defaults_required=True)


class StatusCounts(Record):
    """Cells per status, every status present (zeros included).

    The JSON keys are the status names; ``pass`` is a Python keyword, so its attribute is ``pass_``. A
    test holds the fields to ``gradci.scenarios.contract.cell.STATUSES``.
    """

    model_config = ConfigDict(serialize_by_alias=True, validate_by_name=True, validate_by_alias=True)

    pass_: int = Field(0, alias="pass")
    fail: int = 0
    error: int = 0
    skip: int = 0
    xfail: int = 0
    xpass: int = 0

    @classmethod
    def of(cls, statuses: Iterable[str]) -> StatusCounts:
        return cls.model_validate(status_counts(statuses))

    @classmethod
    def of_tally(cls, tally: Mapping[str, int]) -> StatusCounts:
        return cls.model_validate(status_tally(tally))

    def by_status(self) -> dict[str, int]:
        return {status: getattr(self, status_attribute(status)) for status in STATUSES}

    @property
    def total(self) -> int:
        return sum(self.by_status().values())

    @property
    def counted(self) -> int:
        return counted_cells(self.by_status())

    @property
    def coverage(self) -> float | None:
        return coverage_percent(self.by_status())


class StatusTotals(Record):
    """Cell counts of the run and of its base run (None when there is no base run to compare with)."""

    head: StatusCounts
    base: StatusCounts | None


class CoverageStatus(Record):
    """One commit status (``gradci/project`` or ``gradci/patch``) and the numbers behind it."""

    coverage: float | None
    base_coverage: float | None
    target: float | None  # None: the target is "auto" and there is no base to take it from
    state: CoverageState
    description: str


class GroupCoverage(Record):
    """Coverage of one backend × device, with its first failed and errored cells.

    At most ``LIST_LIMIT`` of them, in the order they were stored, as "scenario [dtype]".
    """

    backend: str
    device: str
    coverage: float | None
    counts: StatusCounts
    missing: list[str]

    @property
    def missing_count(self) -> int:
        """All the group's failed and errored cells, listed or not."""
        return sum(self.counts.by_status()[status] for status in MISSING)


# The Cell fields a report shows of a changed cell.
BRIEF_FIELDS = ("scenario", "backend", "device", "dtype", "status", "max_abs_err", "max_rel_err", "atol",
                "rtol", "message")

if TYPE_CHECKING:  # built from the cell contract at import: its fields are not spelled out for type checkers
    CellBrief: TypeAlias = Any
else:
    CellBrief = cell_record(
        "CellBrief", Record, BRIEF_FIELDS,
        doc="A cell whose status or error changed against the base run, with the base's side beside it.",
        tolerance_ratio=(float | None, None),
        base_status=(CellStatusName, ...),
        base_tolerance_ratio=(float | None, None),
    )


class ReportSubject(Record):
    """Which run a report is about and which run it is compared with."""

    run_id: int
    run_status: str
    finished: bool
    base_run_id: int | None = None  # the finished run of base_sha whose cells are compared
    head_sha: str | None = None
    base_sha: str | None = None
    pr_number: int | None = None


class ChangeCounts(Record):
    """How many entries each list of the report has in all; the lists hold at most ``LIST_LIMIT``."""

    regressions: int = 0
    fixes: int = 0
    near_misses: int = 0
    changed_scenarios: int = 0


class RuleReachTally(Record):
    """How many cells of one backend × operator ran a method of a rule."""

    backend: str
    operator: str
    cells: int


class RuleMethodReach(Record):
    """One method of a rule, its lines, and the cells that ran it (none: ``cells`` 0)."""

    method: str
    first_line: int
    last_line: int
    cells: int
    by: list[RuleReachTally]


RuleChange = Literal["added", "changed", "unchanged"]
Severity = Literal["failure", "warning"]  # gradci.toml's [rules] unexercised


class RuleEntry(Record):
    """A derivative rule of the run's checkout (``gradci.scenarios.rules.discovery.Rule``) and its cells."""

    rule_id: str
    name: str
    kind: str
    file: str
    first_line: int
    last_line: int
    change: RuleChange  # against the base run's rule of the same id; "added" where there is no base catalog
    methods: list[RuleMethodReach]


class RuleFinding(Record):
    """A rule no cell exercised, or whose derivative methods some cells ran and others never.

    ``text`` is the engine's (``gradci.scenarios.rules.summary``): "not exercised by any scenario", or
    "backward exercised, jvp never". ``start_line``-``end_line``: the methods that never ran, in ``file``.
    """

    rule_id: str
    name: str
    kind: str
    file: str
    text: str
    hint: str
    start_line: int
    end_line: int
    change: RuleChange


class RulesSection(Record):
    """The report's rules: those the pull request adds or changes, with their cells and findings.

    Findings on those rules are failing lines (``severity`` "failure", gradci.toml's ``[rules]
    unexercised``, fails the project status) or warnings; findings on rules the pull request left as they
    were are counted in ``other_findings`` and shown on the dashboard.
    """

    severity: Severity
    state: CoverageState
    compared: bool  # the base run has a rule catalog to compare with
    rule_count: int  # the checkout's rules, all of them
    changed_count: int  # those added or changed
    rules: list[RuleEntry]  # the added or changed ones, at most LIST_LIMIT
    findings: list[RuleFinding]  # on added or changed rules, at most LIST_LIMIT
    finding_count: int
    other_findings: int
    config_error: str | None = None

    @property
    def failing(self) -> bool:
        return self.state == "failure"


class PowerFinding(Record):
    """A perturbation planted in a rule that no cell caught (``gradci.scenarios.rules.power``'s line).

    ``text``: "a 1 % error in `bwd`'s second output is caught by no cell: only float32 cells reach it".
    """

    rule_id: str
    name: str
    file: str
    text: str


class PowerSection(Record):
    """What the repository's latest detection-power run found: the perturbations no cell catches.

    A pull request's run does not measure power (it would re-run every cell that reached a rule many
    times): its report reads the latest run of a branch that did, ``run_id`` at ``head_sha``. It is
    information only: it changes no status.
    """

    run_id: int
    head_sha: str | None
    own: bool  # the report's run measured it itself
    rule_count: int  # the rules some cell's plants reached
    findings: list[PowerFinding]  # at most LIST_LIMIT
    finding_count: int
class RerunReason(Record):
    """Why one group (scenario, backend, device) of a run re-ran instead of being carried."""

    scenario: str
    backend: str
    device: str
    reason: str


class CarriedSection(Record):
    """What the run carried from a base run (``Run.carry``): the cells, where from, and why others re-ran.

    ``full``: why the run ran every cell instead (asked for, or due); ``base_run_id`` None and no
    ``full``: there was no base run to carry from.
    """

    carried: int = 0
    base_run_id: int | None = None
    base_sha: str | None = None
    rerun: int = 0
    reasons: list[RerunReason] = []
    full: str | None = None


class RunReport(ReportSubject):
    """Project and patch coverage against the base run, per-group coverage, and the cells that changed.

    The changed cells furthest over (or nearest to) their tolerance come first, ``LIST_LIMIT`` of each
    kind at most, with their numbers in ``change_counts``.
    """

    project: CoverageStatus
    patch: CoverageStatus
    totals: StatusTotals
    groups: list[GroupCoverage]
    changed_scenarios: list[str]
    regressions: list[CellBrief]
    fixes: list[CellBrief]
    near_misses: list[CellBrief]
    change_counts: ChangeCounts
    rules: RulesSection | None = None  # None: the checkout has no derivative rules (or none were recorded)
    power: PowerSection | None = None  # None: neither the run nor a default-branch run measured power
    carried: CarriedSection | None = None  # None: planned before carrying existed, or never planned
