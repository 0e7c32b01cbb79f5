"""gradci's pytest plugin: scenario cells as test items, checked in the sandboxed runner.

Registered through the ``pytest11`` entry point, and inactive unless asked for:

- ``pytest --gradci`` collects the scenarios of the ``gradci.toml`` at pytest's rootdir, one item per
  cell, named ``<scenario>[<backend>-<device>-<dtype>]`` (``-k`` selects on them);
  ``--gradci-backends``, ``--gradci-devices`` and ``--gradci-dtypes`` select as ``gradci check``'s
  flags do, over the file's ``[matrix]``.
- In a test module, a function decorated with ``@gradci.scenario_tests`` (returning scenarios)
  makes its scenarios' cells items of that module, with or without ``--gradci``.

Cells run in the sandboxed warm runner ``gradci check`` uses (``gradci.cli.sandboxed``), one per
pytest process (each pytest-xdist worker has its own): a scenario that segfaults fails its cells,
not the pytest run. Outcomes: pass → passed; fail → failed, the errors against the tolerances and
how the reference was made; error → failed with the exception; skip → skipped; xfail → xfailed;
xpass → failed (strict, as gradci counts it).

Importing this module costs pytest nothing: everything it needs is imported when a hook needs it.
"""
from __future__ import annotations

import atexit
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gradci.scenarios.authoring.scenario_tests import MARK as ITEM_MARK


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("gradci", "gradci: derivative checks as test items")
    group.addoption("--gradci", action="store_true", help="Collect the cells of the gradci.toml at the rootdir.")
    for axis, example in (("backends", "torch-rev,jax-fwd"), ("devices", "cpu,cuda"), ("dtypes", "float64,float32")):
        group.addoption(f"--gradci-{axis}", default=None, metavar=axis.upper(),
                        help=f"Comma-separated {axis} for gradci's cells (e.g. {example}), as gradci check's flags.")
    group.addoption("--gradci-cell-timeout", type=float, default=None, metavar="SECONDS",
                    help="Per-cell timeout in the runner (default: gradci.toml's [check] cell_timeout_s, else 300).")


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    config = parent.config
    if config.getoption("gradci") and file_path.name == "gradci.toml" and file_path.parent == Path(config.rootpath):
        return ConfigFile.from_parent(parent, path=file_path)
    return None


def pytest_pycollect_makeitem(collector: pytest.Collector, name: str, obj: Any) -> Any:
    if callable(obj) and getattr(obj, ITEM_MARK, False) and isinstance(collector, pytest.Module):
        return ScenarioFunction.from_parent(collector, name=name, module_path=Path(collector.path), function=name)
    return None


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "gradci: a gradci cell (scenario × backend × device × dtype)")
    if not config.getoption("gradci"):
        return
    toml = Path(config.rootpath) / "gradci.toml"
    if not toml.is_file():
        raise pytest.UsageError(f"--gradci: no gradci.toml at pytest's rootdir {config.rootpath}; "
                                "add one, or run pytest from the repository that has it")
    if str(toml) not in config.args:  # collected whatever paths pytest was given (testpaths may not reach it)
        config.args.append(str(toml))


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if _Runners.omitted:
        terminalreporter.write_line(f"gradci: {_Runners.omitted} cells not made: backends of a framework the "
                                    "scenario gives no f for (a torch-only scenario has no jax cells), or that compute "
                                    "no such operator (second-order-only backends)")


class _Runners:
    """This pytest process's runner (one per xdist worker), started when the first cells are listed."""

    runner: Any = None
    # Cells not made as items: backends of a framework a scenario gives no f for (told in the summary).
    omitted: int = 0
    # Where the gradci.toml files written for @scenario_tests functions live: shown to the runner.
    folder: Path | None = None

    @classmethod
    def written(cls) -> Path:
        if cls.folder is None:
            cls.folder = Path(tempfile.mkdtemp(prefix="gradci-pytest-"))
        return cls.folder

    @classmethod
    def get(cls, config: pytest.Config, timeout_s: float) -> Any:
        if cls.runner is None:
            from gradci.cli.sandboxed import local_runner_for

            cls.runner = local_runner_for(timeout_s, readable=(Path(config.rootpath), cls.written()))
            config.add_cleanup(cls.close)
            atexit.register(cls.close)
        return cls.runner

    @classmethod
    def close(cls) -> None:
        if cls.runner is not None:
            cls.runner.close()
            cls.runner = None
        if cls.folder is not None:
            shutil.rmtree(cls.folder, ignore_errors=True)
            cls.folder = None


class _CellSource(pytest.Collector):
    """Lists a source's scenarios in the runner and yields one item per cell."""

    def source(self) -> str:
        """What the runner loads: a repository's root, or a gradci.toml written for the collector."""
        raise NotImplementedError

    def collect(self) -> Iterator[pytest.Item]:
        from gradci.cli.sandboxed import DEFAULT_CELL_TIMEOUT_S, Target, local_jobs
        from gradci.scenarios.authoring.project import ProjectError, load_project
        from gradci.scenarios.contract.matrix import Matrix
        from gradci.worker.runner import RunnerError

        config = self.config
        source = self.source()
        try:
            project = load_project(source)
        except ProjectError as exc:
            raise self.CollectError(f"gradci: {exc}") from None
        flags = Matrix.of(**{axis: _listed(config.getoption(f"gradci_{axis}")) for axis in ("backends", "devices",
                                                                                             "dtypes")})
        timeout_s = config.getoption("gradci_cell_timeout") or project.cell_timeout_s or DEFAULT_CELL_TIMEOUT_S
        runner = _Runners.get(config, timeout_s)
        try:
            planned = local_jobs(runner, Target(source, project.matrix.overridden(flags)))
        except (RunnerError, ValueError) as exc:
            raise self.CollectError(f"gradci: {exc}") from None
        _Runners.omitted += planned.omitted
        for specs in planned.scenarios:
            for spec in specs:
                yield CellItem.from_parent(self, name=f"{spec.scenario}[{spec.backend}-{spec.device}-{spec.dtype}]",
                                           spec=spec)


def _listed(value: str | None) -> list[str] | None:
    return [part.strip() for part in value.split(",") if part.strip()] or None if value else None


class ConfigFile(_CellSource, pytest.File):
    """The rootdir's gradci.toml."""

    def source(self) -> str:
        return str(self.path.parent)


class ScenarioFunction(_CellSource):
    """A ``@gradci.scenario_tests`` function of a test module.

    The runner imports the module from the rootdir and calls it, through a gradci.toml written for it.
    """

    def __init__(self, *, module_path: Path, function: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.module_path, self.function = module_path, function

    def source(self) -> str:
        root = Path(self.config.rootpath)
        module = ".".join(self.module_path.with_suffix("").relative_to(root).parts)
        toml = _Runners.written() / f"{module}.{self.function}.toml"
        toml.write_text(f'[scenarios]\nroot = "{root}"\nmodules = ["{module}:{self.function}"]\n')
        return str(toml)


class CellFailed(Exception):
    """A cell that is not a pass: reported as its text, without a Python traceback."""


class CellItem(pytest.Item):
    def __init__(self, *, spec: Any, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.spec = spec
        self.add_marker(pytest.mark.gradci)
        for keyword in (spec.backend, spec.device, spec.dtype, spec.operator, spec.framework):
            self.keywords[keyword] = True

    def runtest(self) -> None:
        from gradci.cli.sandboxed import cell_of

        runner = _Runners.runner
        (record,) = runner.run_cells([self.spec])
        cell = cell_of(record)
        self.user_properties.append(("gradci_status", str(cell.status)))
        outcome = str(cell.status)
        if outcome == "pass":
            return
        if outcome == "skip":  # reported at the cell, not at this line
            raise pytest.skip.Exception(cell.message or "skipped", _use_item_location=True)
        if outcome == "xfail":
            pytest.xfail(cell.message or "expected failure")
        raise CellFailed(failure_text(cell))

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException]) -> str:  # type: ignore[override]
        if isinstance(excinfo.value, CellFailed):
            return str(excinfo.value)
        return super().repr_failure(excinfo)  # type: ignore[return-value]

    def reportinfo(self) -> tuple[Path, int, str]:
        return self.path, 0, f"gradci: {self.name}"


def failure_text(cell: Any) -> str:
    """What a failing cell tells pytest's report.

    The verdict, the errors against the tolerances, how the reference was made, and the warnings.
    """
    outcome = str(cell.status)
    head = {"fail": "fail", "error": "error", "xpass": "xpass (strict: an expected failure no longer fails)"}.get(
        outcome, outcome)
    lines = [f"{head}: {cell.message}" if cell.message else head]
    if outcome == "fail":
        lines.append(f"max abs error {cell.max_abs_err:.3g}, max rel error {cell.max_rel_err:.3g} "
                     f"(atol {cell.atol:.3g}, rtol {cell.rtol:.3g})")
    if cell.reference:
        error = f", error estimate {cell.reference_error:.2g}" if cell.reference_error is not None else ""
        lines.append(f"reference: {cell.reference}{error}")
    if cell.warnings:
        lines.append("warnings:\n  " + cell.warnings.replace("\n", "\n  "))
    return "\n".join(lines)
