"""``gradci check``: check a repository's scenarios in the sandboxed runner and report.

It checks a repository's scenarios (or the built-in library) in the sandboxed runner
(``gradci.cli.sandboxed``), with a progress bar on a terminal's stderr.
"""
from __future__ import annotations

import json
import os
import sys
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

import gradci
from gradci.cli.affected import AffectedRecords, BaseError, read_base, split
from gradci.cli.client import coverage_text
from gradci.cli.power import PowerRecords, render_power
from gradci.cli.rule_coverage import RuleRecords, render_rules, write_rules_report
from gradci.cli.sandboxed import (
    DEFAULT_CELL_TIMEOUT_S,
    Target,
    cell_of,
    check_in_parallel,
    check_planned,
    default_parallelism,
    local_jobs,
    local_runner,
    local_runner_for,
    thread_limits,
)
from gradci.cli.upload import RuleUpload, UploadError, UploadOptions, commit_fields, shards, upload
from gradci.scenarios.authoring.project import ProjectError, load_project
from gradci.scenarios.contract.cell import FAILING, STATUSES, Cell
from gradci.scenarios.contract.coverage import coverage_percent
from gradci.scenarios.contract.devices import CPU, CUDA
from gradci.scenarios.contract.formats import cells_to_junit
from gradci.scenarios.contract.matrix import Matrix
from gradci.scenarios.contract.wording import count_of, plural
from gradci.scenarios.rules.reports import ReportError, report_format
from gradci.scenarios.rules.summary import WARNING, unexercised_severity
from gradci.worker.agreement_specs import agreement_spec
from gradci.worker.runner import CellSpec, RunnerError, WarmRunner

FORMATS = ("table", "json", "junit")
EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


class UsageError(Exception):
    """What the user asked for cannot be checked: one line, exit 2."""


def plain_console(**options: Any) -> Console:
    """A console that prints text as it is: scenario names, rule names and messages are the user's.

    Rich would read "[bold]" or "[link=…]" in them as markup (a scenario named "[/]" would crash the
    check); nothing gradci prints here needs markup.
    """
    return Console(markup=False, highlight=False, **options)


def gather(repo: str | None, flags: Matrix, cell_timeout_s: float | None,
           family: str | None) -> tuple[Target, float]:
    """What to check and the per-cell timeout, from the flags over the repository's gradci.toml.

    The flags win over gradci.toml, which is read as data: its scenario modules are imported in the
    runner only.
    """
    if cell_timeout_s is not None and cell_timeout_s <= 0:
        raise UsageError(f"--cell-timeout must be a positive number of seconds, not {cell_timeout_s:g}")
    if family is not None:
        if repo:
            raise UsageError("--family picks from the built-in library: give it without --repo")
        if family not in gradci.library.FAMILIES:
            raise UsageError(f"--family must be one of {', '.join(gradci.library.FAMILIES)}, not {family!r}")
    if not repo:
        return Target(None, flags, family), cell_timeout_s or DEFAULT_CELL_TIMEOUT_S
    project = load_project(repo)
    matrix = project.matrix.overridden(flags)
    return Target(str(project.root), matrix), cell_timeout_s or project.cell_timeout_s or DEFAULT_CELL_TIMEOUT_S


def narrowed_by(flags: Matrix) -> str:
    """The flags that narrow a check below its repository's own selection, in words ("" where none do)."""
    parts = ([f"-k {','.join(flags.scenarios)}"] if flags.scenarios else []) + (
        [f"--backends {','.join(flags.backends)}"] if flags.backends else [])
    return " ".join(parts)


def run_check(repo: str | None, flags: Matrix, fmt: str, output: str | None, *, cell_timeout_s: float | None = None,
              family: str | None = None, verbose: bool = False, repeats: int | None = None,
              parallel: int | None = None, upload_to: UploadOptions | None = None, timings: bool | None = None,
              rules: bool = True, cov_report: str | None = None, power: bool = False,
              base: str | None = None, run_all: bool = False) -> int:
    """Run ``gradci check`` and return its exit code.

    ``upload_to``: also send the cells to a gradci server (``gradci.cli.upload``); ``timings``: steady-state
    times over repeated calls (None: gradci.toml's ``[check] timings``, else one call); ``rules``: record the
    repository's rule coverage (``gradci.cli.rule_coverage``); ``cov_report``: write its lines to this file;
    ``power``: re-run the cells that reached a rule with errors planted in it (``gradci.cli.power``);
    ``base``: a previous check's JSON, whose cells with unchanged inputs are carried (``gradci.cli.affected``),
    unless ``run_all``.
    """
    err = plain_console(stderr=True, soft_wrap=True)
    catalog: list[dict] = []
    records = RuleRecords()
    powers = PowerRecords()
    try:
        if fmt not in FORMATS:
            raise UsageError(f"--format must be one of {', '.join(FORMATS)}")
        if repeats is not None and repeats < 1:
            raise UsageError(f"--repeats must be a whole number of at least 1, not {repeats}")
        if parallel is not None and parallel < 1:
            raise UsageError(f"-j must be a whole number of at least 1, not {parallel}")
        target, timeout_s = gather(repo, flags, cell_timeout_s, family)
        project = load_project(target.source) if target.source else None
        if repeats is None and project:  # the flag over gradci.toml's [check] repeats
            repeats = project.repeats
        if timings is None and project:  # and over [check] timings
            timings = project.timings
        for name in target.matrix.backends or []:
            gradci.get_backend(name)
        config = project.config if project else {}
        if upload_to is not None:  # before checking: a CI job missing what the upload needs fails at once
            commit_fields(upload_to, os.environ)
            shards(upload_to, config)
        wanted = parallel or default_parallelism(target.matrix)
        options = {**({} if repeats is None else {"repeats": repeats}), **({"timings": True} if timings else {})}
        traced = _rules_wanted(rules, cov_report, target, power)
        severity = unexercised_severity(config)
        selection = narrowed_by(flags)
        if selection:  # rules the left-out scenarios or backends reach would be findings: the whole check decides
            severity = WARNING
        if traced:
            options["rule_coverage"] = True
        if power:
            options["power"] = True
        affected = AffectedRecords(target.source, options)
        base_cells = read_base(base) if base is not None and not run_all else None
        cells, runners, omitted = _check_with_progress(target, timeout_s, err, options, wanted, catalog, records,
                                                       powers, affected, base_cells, base)
    except (UsageError, ProjectError, RunnerError, UploadError, BaseError, ValueError) as exc:
        err.print(f"error: {exc}")
        return EXIT_USAGE
    report = gradci.Report(cells, omitted)
    text = {"json": lambda: _json(report.cells, powers if power else None, affected, records),
            "junit": lambda: cells_to_junit(report.cells)}
    rules_console = err
    if fmt == "table":
        stream = open(output, "w") if output else sys.stdout
        console = rules_console = plain_console(file=stream, width=None if stream.isatty() else 160)
        render_table(report.cells, console, verbose=verbose, omitted=report.omitted)
        if base_cells is not None:
            console.print(f"{affected.carried_count()} of {count_of(len(report.cells), 'cell')} carried from {base} "
                          "(their inputs are unchanged: code they ran, data they read, environment); --all runs "
                          "every cell")
        if runners > 1:
            console.print(f"checked by {runners} runners at once (-j {runners}): steady-state times include the "
                          "others' load; -j 1 for timings")
    elif output:
        Path(output).write_text(text[fmt]())
    else:
        sys.stdout.write(text[fmt]() + "\n")
    rules_fail = False
    if traced and target.source:  # beside the cells' verdicts, never in them
        summary = records.summary(report.cells)
        rules_fail = render_rules(summary, rules_console, severity, selection)
        if cov_report:
            try:
                fmt_written = write_rules_report(cov_report, target.source, summary)
            except (ReportError, OSError) as exc:
                err.print(f"error: {exc}")
                return EXIT_USAGE
            err.print(f"wrote the lines the cells ran to {cov_report} ({fmt_written})")
        if power:  # information beside the verdicts: it changes neither them nor the exit code
            render_power(powers.summary(summary.rules, report.cells), powers, report.cells, rules_console)
    if upload_to is not None:
        try:
            err.print(upload(upload_to, report.cells, catalog, config,
                             rules=_rule_upload(target, records, powers if power else None) if traced else None))
        except UploadError as exc:
            err.print(f"error: upload to {upload_to.url}: {exc}")
            return EXIT_USAGE
    if report.ok and (why := report.nothing_checked()):  # nothing that did not run reads as a pass
        err.print(f"nothing was checked: {why}")
        return EXIT_FAILED
    return EXIT_OK if report.ok and not rules_fail else EXIT_FAILED


def _rule_upload(target: Target, records: RuleRecords, powers: PowerRecords | None) -> RuleUpload | None:
    """What rule coverage (and --power) recorded, for the upload to carry beside the cells."""
    if not target.source:
        return None
    return RuleUpload(root=target.source, rules=list(records.rules.values()),
                      coverage={key: record.to_dict() for key, record in records.records.items()},
                      power={key: record.to_dict() for key, record in powers.records.items()} if powers else {})


def _json(cells: list[Cell], powers: PowerRecords | None, affected: AffectedRecords, records: RuleRecords) -> str:
    """The cells as JSON, each with its records.

    Dependencies (a later ``--base`` reads them), rule coverage, provenance where carried, and with
    --power its ``power`` record.
    """
    found = affected.json_cells(records.json_cells([cell.to_dict() for cell in cells]))
    return json.dumps(powers.json_cells(found) if powers is not None else found, indent=2)


def _rules_wanted(rules: bool, cov_report: str | None, target: Target, power: bool = False) -> bool:
    """Whether to record rule coverage: for a repository's own code, unless --no-rules."""
    if power:  # the cells to re-run are those the coverage saw reach a rule
        if not target.source:
            raise UsageError("--power plants errors in a repository's own derivative rules: give it with --repo")
        if not rules:
            raise UsageError("--power re-runs the cells that rule coverage saw reach a rule: drop --no-rules")
    if cov_report is not None:
        if not target.source:
            raise UsageError("--cov-report measures a repository's own files: give it with --repo")
        if not rules:
            raise UsageError("--cov-report needs the rule coverage that --no-rules turns off")
        report_format(cov_report)
    return rules and target.source is not None


def _check_with_progress(target: Target, cell_timeout_s: float, err: Console, options: dict,
                         parallel: int = 1, catalog: list[dict] | None = None,
                         records: RuleRecords | None = None,
                         powers: PowerRecords | None = None, affected: AffectedRecords | None = None,
                         base_cells: list[dict] | None = None, base: str | None = None) -> tuple[list[Cell], int, int]:
    """Check the target's cells, with a progress bar on stderr when it is a terminal.

    Returns (the cells, the number of runners that checked them, the cells not made). The bar shows
    whatever the report's format and destination: it never reaches stdout, nor a log that is not a
    terminal. ``options``: the engine's (``check_scenario``'s keyword arguments);
    ``parallel``: at most this many sandboxed runners at once; ``catalog`` gets each planned
    scenario's name, operator and fingerprint (an upload's patch coverage compares them).
    """
    columns = (TextColumn("{task.description}", markup=False), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=err, disable=not err.is_terminal, transient=True) as progress, \
            local_runner(target, cell_timeout_s) as runner:
        task = progress.add_task("starting the runner", total=None)
        runner.extra_env.update(thread_limits(parallel))
        plan = local_jobs(runner, target, rules=bool(options.get("rule_coverage")))
        planned, functions = [with_agreement(specs) for specs in plan.scenarios], plan.functions
        if not planned:
            raise UsageError("no scenario matches")
        if catalog is not None:
            catalog.extend({"name": specs[0].scenario, "operator": specs[0].operator,
                            "fingerprint": specs[0].fingerprint} for specs in planned if specs)
        carried: list[Cell] = []
        if base_cells is not None:
            affected = affected or AffectedRecords(target.source, options)
            planned, taken, _ = split(base_cells, planned, target.source, affected.environment, base or "")
            taken = affected.take(taken)
            taken = records.take(taken, {}) if records is not None else taken
            carried = [cell_of(cell) for cell in (powers.take(taken) if powers is not None else taken)]
            planned = [specs for specs in planned if specs]
            if not planned:
                return carried, 1, plan.omitted
        progress.update(task, total=len(planned))

        def advance(done: int, name: str) -> None:
            progress.update(task, completed=done, description=name[:40])

        count = min(parallel, len(set(functions.values())) or 1)
        if count <= 1:
            return (carried + check_planned(_WithOptions(runner, options, records, powers, affected), planned,
                                            advance), 1, plan.omitted)
        others = [local_runner_for(cell_timeout_s, target.matrix) for _ in range(count - 1)]
        for other in others:
            other.extra_env.update(thread_limits(parallel))
        try:
            runners = [_WithOptions(one, options, records, powers, affected) for one in (runner, *others)]
            return carried + check_in_parallel(runners, planned, functions, advance), count, plan.omitted
        finally:
            for other in others:
                other.close()


def with_agreement(specs: list[CellSpec]) -> list[CellSpec]:
    """A scenario's cells plus their CPU–GPU agreement cells.

    Where the cells run on the cpu and a cuda device, each cuda cell gets its agreement cell
    (``gradci.scenarios.verdict.device_agreement``): the engine adds them for such a matrix, and
    the runner answers the cells it is asked for.
    """
    if not any(spec.device == CPU for spec in specs):
        return specs
    return specs + [agreement_spec(spec) for spec in specs if spec.device.startswith(CUDA)]


class _WithOptions:
    """A runner whose scenario requests carry the engine's options; rule-coverage records go to ``records``."""

    def __init__(self, runner: WarmRunner, options: dict, records: RuleRecords | None = None,
                 powers: PowerRecords | None = None, affected: AffectedRecords | None = None) -> None:
        self.runner, self.options, self.records, self.powers = runner, options, records, powers
        self.affected = affected

    def run_cells(self, specs: list[CellSpec], **kwargs) -> list[dict]:
        cells = self.runner.run_cells(specs, options=self.options, **kwargs)
        if self.affected is not None:
            cells = self.affected.take(cells)
        if self.powers is not None:
            cells = self.powers.take(cells)
        return self.records.take(cells, self.runner.rules) if self.records is not None else cells


def render_table(cells: list[Cell], console: Console, verbose: bool = False, omitted: int = 0) -> None:
    groups: dict[tuple[str, str, str], Counter] = defaultdict(Counter)
    for cell in cells:
        groups[(cell.backend, cell.device, cell.dtype)][cell.status] += 1
    summary = Table(title="gradci check: cells by backend × device × dtype")
    for column in ("backend", "device", "dtype", *STATUSES, "coverage"):
        summary.add_column(column, justify="left" if column in ("backend", "device", "dtype") else "right")
    for (backend, device, dtype), counts in groups.items():
        summary.add_row(backend, device, dtype, *(str(counts[s]) for s in STATUSES),
                        coverage_text(coverage_percent(counts)))
    console.print(summary)
    failing = [c for c in cells if c.status in FAILING]
    if failing:
        table = Table(title=count_of(len(failing), "failing cell"))
        for column in ("scenario", "backend", "device", "dtype", "status", "max abs err", "max rel err",
                       "atol", "rtol", "message"):
            table.add_column(column, overflow="fold")
        for c in failing:
            table.add_row(c.scenario, c.backend, c.device, c.dtype, c.status, _num(c.max_abs_err),
                          _num(c.max_rel_err), _num(c.atol), _num(c.rtol), c.message)
        console.print(table)
    detailed = [c for c in failing if c.detail and c.detail != c.message]
    if detailed and verbose:  # the whole exception, where the message has its first line only
        title = f"the {plural(len(detailed), 'exception')} of {count_of(len(detailed), 'cell')} in full"
        console.print(_cells_with("exception", title, detailed, lambda c: c.detail))
    warned = [c for c in cells if c.warnings]
    if warned and verbose:
        title = f"warnings raised in {len(warned)} of {count_of(len(cells), 'cell')}"
        console.print(_cells_with("warnings", title, warned, lambda c: c.warnings))
    elif warned:
        console.print(f"warnings raised in {len(warned)} of {count_of(len(cells), 'cell')}: -v shows them")
    unreproducible = [c for c in cells if c.repeat_spread]
    if unreproducible:  # not failures, but worth a line: each such cell's message has its spread
        console.print(f"{count_of(len(unreproducible), 'cell')} not bitwise reproducible over their repeats: "
                      + ", ".join(f"{c.scenario} ({c.backend}, {c.device}, {c.dtype})" for c in unreproducible[:5])
                      + (" …" if len(unreproducible) > 5 else ""))
    totals: Counter[str] = Counter(c.status for c in cells)
    coverage = coverage_text(coverage_percent(totals))
    console.print(" ".join(f"{totals[s]} {s}" for s in STATUSES) + f" — gradient coverage {coverage}")
    if omitted:
        console.print(f"{count_of(omitted, 'cell')} not made: backends of a framework the scenario gives no f for (a "
                      "torch-only scenario has no jax cells), or that compute no such operator (jax-fwd-rev, "
                      "torch-func-rev-fwd: second order only)")


def _cells_with(column: str, title: str, cells: list[Cell], text: Callable[[Cell], str | None]) -> Table:
    """A table of cells, each with one long text (its exception, its warnings) folded to fit."""
    table = Table(title=title)
    for name in ("scenario", "backend", "device", "dtype", column):
        table.add_column(name, overflow="fold")
    for c in cells:
        table.add_row(c.scenario, c.backend, c.device, c.dtype, text(c))
    return table


def _num(value: float | None) -> str:
    return "—" if value is None else f"{value:.3g}"
