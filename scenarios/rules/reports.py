"""The project lines the derivative cells reached, as an LCOV or Cobertura XML file.

coverage.py's own reporters write them, from a data file made of the cells' records, so that the
tools that read a coverage report (Codecov, genhtml, an editor's gutter) read this one. The files are
those some cell ran and those that define rules (a rule no cell reached shows all its lines missed).
"""
from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterable
from pathlib import Path

from gradci.scenarios.rules.records import LinesByFile

FORMATS = {".xml": "cobertura", ".info": "lcov", ".lcov": "lcov"}


class ReportError(ValueError):
    """A report that cannot be written: its name says no format, or a file of it cannot be read."""


def report_format(path: str | Path) -> str:
    """"lcov" or "cobertura", from the report's file name; ReportError for another."""
    fmt = FORMATS.get(Path(path).suffix.lower())
    if fmt is None:
        raise ReportError(f"--cov-report {path}: name it *.xml (Cobertura) or *.info / *.lcov (LCOV)")
    return fmt


def inside(root: Path, file: str) -> bool:
    """Whether ``file``, relative to ``root``, names a file inside it (links followed)."""
    if not file or Path(file).is_absolute():
        return False
    return (root / file).resolve().is_relative_to(root)


def write_report(path: str | Path, root: str | Path, lines: LinesByFile, rule_files: Iterable[str] = ()) -> str:
    """Write the report of ``lines`` (relative to ``root``) to ``path``; its format ("lcov", "cobertura")."""
    import coverage
    from coverage.data import CoverageData
    from coverage.exceptions import CoverageException

    fmt = report_format(path)
    root = Path(root).resolve()
    # The file names come from the sandboxed runner, which runs the repository's code: only files inside
    # the checkout are read (coverage.py reads each file it reports), never ../ or absolute paths.
    lines = {file: numbers for file, numbers in lines.items() if inside(root, file)}
    rule_files = [file for file in rule_files if inside(root, file)]
    with tempfile.TemporaryDirectory(prefix="gradci-rules-") as folder:
        data_file = str(Path(folder) / ".coverage")
        data = CoverageData(basename=data_file)
        data.add_lines(dict(lines))
        for file in rule_files:
            data.touch_file(file)
        data.write()
        cov = coverage.Coverage(data_file=data_file, config_file=False)
        # Paths relative to the project's root, in the data and the report: coverage.py finds the
        # sources from the working folder, the root while it reports.
        cov.set_option("run:relative_files", True)
        cov.load()
        path = Path(path).resolve()
        try:
            with contextlib.chdir(root):
                if fmt == "lcov":
                    cov.lcov_report(outfile=str(path))
                else:
                    cov.xml_report(outfile=str(path))
        except CoverageException as exc:
            raise ReportError(f"--cov-report {path}: {exc}") from None
    return fmt
