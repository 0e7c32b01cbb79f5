"""``gradci check``: run the engine on a repository's scenarios (or the built-in library) and report."""
from __future__ import annotations

import sys
from collections import Counter, defaultdict
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

import scenarios
from gradci.client import coverage_text
from scenarios.cell import FAILING, STATUSES, Cell
from scenarios.devices import expand_devices
from scenarios.formats import cells_to_json, cells_to_junit
from scenarios.matrix import Matrix, select_scenarios
from scenarios.project import ProjectError, load_project, load_scenarios
from services.reports.coverage import coverage_percent

FORMATS = ("table", "json", "junit")
EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def gather(repo: str | None, flags: Matrix) -> tuple[list[scenarios.Scenario], Matrix]:
    """The scenarios and the matrix to check: flags over the repository's gradci.toml."""
    if repo:
        project = load_project(repo)
        found, matrix = load_scenarios(project), project.matrix.overridden(flags)
    else:
        found, matrix = scenarios.library.default(), flags
    return select_scenarios(found, matrix.scenarios), matrix


def run_check(repo: str | None, flags: Matrix, fmt: str, output: str | None) -> int:
    err = Console(stderr=True, soft_wrap=True)
    if fmt not in FORMATS:
        err.print(f"error: --format must be one of {', '.join(FORMATS)}")
        return EXIT_USAGE
    try:
        chosen, matrix = gather(repo, flags)
        for name in matrix.backends or []:
            scenarios.get_backend(name)
    except (ProjectError, ValueError) as exc:
        err.print(f"error: {exc}", markup=False, highlight=False)
        return EXIT_USAGE
    if not chosen:
        err.print("error: no scenario matches", markup=False)
        return EXIT_USAGE
    report = _run_with_progress(chosen, matrix, show=(fmt == "table" and output is None) or err.is_terminal)
    text = {"json": lambda: cells_to_json(report.cells), "junit": lambda: cells_to_junit(report.cells)}
    if fmt == "table":
        stream = open(output, "w") if output else sys.stdout
        console = Console(file=stream, width=None if stream.isatty() else 160)
        render_table(report.cells, console)
    elif output:
        Path(output).write_text(text[fmt]())
    else:
        sys.stdout.write(text[fmt]() + "\n")
    return EXIT_OK if report.ok else EXIT_FAILED


def _run_with_progress(chosen, matrix: Matrix, show: bool) -> scenarios.Report:
    from scenarios.checker import available_devices

    devices = None if matrix.devices is None else expand_devices(matrix.devices, available_devices())
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=Console(stderr=True), disable=not show, transient=True) as progress:
        task = progress.add_task("checking", total=len(chosen))
        reports = []
        for scenario in chosen:
            progress.update(task, description=scenario.name[:40])
            reports.append(scenarios.check([scenario], backends=matrix.backends, devices=devices,
                                           dtypes=matrix.dtypes))
            progress.advance(task)
    return scenarios.Report([cell for r in reports for cell in r.cells])


def render_table(cells: list[Cell], console: Console) -> None:
    groups: dict[tuple[str, str, str], Counter] = defaultdict(Counter)
    for cell in cells:
        groups[(cell.backend, cell.device, cell.dtype)][cell.status] += 1
    summary = Table(title="gradci check: cells by backend × device × dtype")
    for column in ("backend", "device", "dtype", *STATUSES, "coverage"):
        summary.add_column(column, justify="left" if column in ("backend", "device", "dtype") else "right")
    for (backend, device, dtype), counts in groups.items():
        summary.add_row(backend, device, dtype, *(str(counts[s]) for s in STATUSES), coverage_text(coverage_percent(counts)))
    console.print(summary)
    failing = [c for c in cells if c.status in FAILING]
    if failing:
        table = Table(title=f"{len(failing)} failing cells")
        for column in ("scenario", "backend", "device", "dtype", "status", "max abs err", "max rel err",
                       "atol", "rtol", "message"):
            table.add_column(column, overflow="fold")
        for c in failing:
            table.add_row(c.scenario, c.backend, c.device, c.dtype, c.status, _num(c.max_abs_err),
                          _num(c.max_rel_err), _num(c.atol), _num(c.rtol), c.message)
        console.print(table)
    totals = Counter(c.status for c in cells)
    console.print(" ".join(f"{totals[s]} {s}" for s in STATUSES) + f" — gradient coverage {coverage_text(coverage_percent(totals))}")


def _num(value: float | None) -> str:
    return "—" if value is None else f"{value:.3g}"
