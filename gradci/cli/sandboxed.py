"""``gradci check``'s cells, checked in the sandboxed warm runner the service's workers use.

The command line imports no scenario code and no framework itself: it lists the scenarios in the
runner (``gradci.worker.runner``), then asks for one scenario's cells per request. The runner checks them
together, as the engine does in-process, so forward and reverse modes are compared and the verdicts
are the engine's. A scenario that segfaults, hangs, exits or exhausts memory becomes error cells
naming the signal or the timeout, and the next scenario runs in a fresh runner.
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
import queue
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol

from gradci.scenarios.contract.cell import FIELD_NAMES, Cell
from gradci.scenarios.contract.devices import CPU, expand_devices
from gradci.scenarios.contract.matrix import Matrix, select_scenarios
from gradci.services.settings import get_settings
from gradci.worker.runner import CellSpec, WarmRunner
from gradci.worker.sandbox import SandboxPolicy

DEFAULT_CELL_TIMEOUT_S = 300.0


@dataclasses.dataclass(frozen=True)
class Target:
    """What to check: a repository's root, the matrix, and a family of the built-in library.

    A root of None is the built-in library; a family of None is every family.
    """

    source: str | None
    matrix: Matrix
    family: str | None = None


def cache_folder() -> Path:
    """Where runners keep their scratch folders and jax's compilation cache between checks."""
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "gradci" / "check"


def memory_limit_mb(matrix: Matrix) -> int | None:
    """The worker's address-space limit (GRADCI_RUNNER_MEMORY_LIMIT_MB), on the CPU only.

    CUDA reserves address space far beyond the memory it uses. Without --devices a machine with an
    NVIDIA driver may check on its GPUs, so no limit there.
    """
    on_cpu_only = (all(device == CPU for device in matrix.devices) if matrix.devices is not None
                   else not os.path.exists("/dev/nvidiactl"))
    return (get_settings().runner_memory_limit_mb or None) if on_cpu_only else None


def local_runner_for(cell_timeout_s: float, matrix: Matrix | None = None,
                     readable: tuple[Path, ...] = ()) -> WarmRunner:
    """A runner like the worker's, in the same box where bubblewrap works here, started on first use.

    The code is the developer's own: without bubblewrap, it says so once and runs unboxed. It reads
    ``readable`` besides the checked folder.
    """
    workdir = cache_folder()
    workdir.mkdir(parents=True, exist_ok=True)
    settings = get_settings()
    sandbox = SandboxPolicy(memory_limit_mb=memory_limit_mb(matrix or Matrix()), required=False,
                            scratch_mb=settings.runner_scratch_mb or None, pids_max=settings.runner_pids_max,
                            gpu=memory_limit_mb(matrix or Matrix()) is None, readable=readable,
                            fresh_identity=False)
    return WarmRunner(cell_timeout_s=cell_timeout_s, workdir=workdir, sandbox=sandbox,
                      max_rss_mb=settings.runner_max_rss_mb, cache_max_mb=settings.runner_cache_max_mb)


@contextlib.contextmanager
def local_runner(target: Target, cell_timeout_s: float) -> Iterator[WarmRunner]:
    """``local_runner_for`` the target's repository, closed afterwards."""
    runner = local_runner_for(cell_timeout_s, target.matrix)
    try:
        yield runner
    finally:
        runner.close()


@dataclasses.dataclass(frozen=True)
class LocalPlan:
    """The cells ``gradci check`` asks the runner for."""

    scenarios: list[list[CellSpec]]  # each chosen scenario's cells, in the engine's order
    functions: dict[str, str]  # scenario → its function's fingerprint (scenarios sharing one stay together)
    # Cells not made: backends of a framework a scenario gives no f for, or of an operator they do not
    # compute (jax-fwd-rev's first order): counted, not listed.
    omitted: int = 0


def local_jobs(runner: WarmRunner, target: Target, rules: bool = False) -> LocalPlan:
    """The cells of each chosen scenario, in the engine's order (device, dtype, backend).

    Raises ``gradci.worker.runner.RunnerError`` when the scenarios cannot be loaded, ValueError for a
    device that is not there.
    """
    listing = runner.list_source(target.source, availability=True, family=target.family, trusted=True,
                                 rules=rules and target.source is not None)
    if rules and target.source is not None:  # carried cells run no request: the listing names the rules
        runner.rules.update((rule["id"], rule) for rule in listing.rules or ())
    chosen = select_scenarios(listing.scenarios, target.matrix.scenarios, name=lambda s: s["name"])
    backends = {backend["name"]: backend for backend in listing.backends}
    names = target.matrix.backends or [name for name, b in backends.items()
                                       if b["unavailable"] is None and b.get("default", True)]
    found = listing.devices or []  # asked for: availability=True
    devices = found if target.matrix.devices is None else expand_devices(target.matrix.devices, found)
    planned, omitted = [], 0
    for s in chosen:
        dtypes = target.matrix.dtypes if target.matrix.dtypes is not None else s["dtypes"]
        own = [name for name in names if backends[name]["framework"] not in s.get("lacks", ())
               and s["operator"] in backends[name].get("operators", (s["operator"],))]
        omitted += (len(names) - len(own)) * len(devices) * len(dtypes)
        planned.append([CellSpec(scenario=s["name"], backend=name, device=device, dtype=dtype, operator=s["operator"],
                                 framework=backends[name]["framework"], mode=backends[name]["mode"],
                                 source=target.source, fingerprint=s["fingerprint"], family=target.family,
                                 trusted=True)  # the developer's own code: its cache is theirs
                        for device in devices for dtype in dtypes for name in own])
    return LocalPlan(planned, {s["name"]: s["function"] for s in chosen}, omitted)


class CellRunner(Protocol):
    """What checking planned cells needs of a runner (``WarmRunner``, or one that adds options)."""

    def run_cells(self, specs: list[CellSpec]) -> list[dict[str, Any]]: ...


def check_planned(runner: CellRunner, planned: list[list[CellSpec]],
                  on_scenario: Callable[[int, str], None] = lambda done, name: None) -> list[Cell]:
    """Every planned scenario's cells, one request each.

    ``on_scenario`` hears each one start (with how many were checked before it).
    """
    cells: list[Cell] = []
    for done, specs in enumerate(planned):
        if specs:
            on_scenario(done, specs[0].scenario)
            cells += [cell_of(record) for record in runner.run_cells(specs)]
    return cells


def check_in_parallel(runners: Sequence[CellRunner], planned: list[list[CellSpec]], functions: dict[str, str],
                      on_scenario: Callable[[int, str], None] = lambda done, name: None) -> list[Cell]:
    """``check_planned`` over several runners at once.

    The scenarios of one function go to one runner together (its references and f's evaluations are
    shared there, as in one runner), the largest groups first; the cells come back in ``planned``'s
    order, whichever runner checked them.
    """
    groups: dict[str, list[int]] = {}
    for index, specs in enumerate(planned):
        if specs:
            groups.setdefault(functions.get(specs[0].scenario, specs[0].scenario), []).append(index)
    work: queue.Queue[list[int]] = queue.Queue()
    for indices in sorted(groups.values(), key=lambda group: -sum(len(planned[i]) for i in group)):
        work.put(indices)
    results: dict[int, list[Cell]] = {}
    lock = threading.Lock()

    def serve(runner: CellRunner) -> None:
        while True:
            try:
                indices = work.get_nowait()
            except queue.Empty:
                return
            for index in indices:
                with lock:
                    on_scenario(len(results), planned[index][0].scenario)
                cells = [cell_of(record) for record in runner.run_cells(planned[index])]
                with lock:
                    results[index] = cells

    threads = [threading.Thread(target=serve, args=(runner,), name=f"gradci-check-{n}", daemon=True)
               for n, runner in enumerate(runners)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return [cell for index in sorted(results) for cell in results[index]]


def default_parallelism(matrix: Matrix) -> int:
    """How many runners ``gradci check`` starts by default.

    The usable cores, bounded by memory so that that many runners fit under their memory ceiling
    (GRADCI_RUNNER_MAX_RSS_MB, else the address-space limit).
    """
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    settings = get_settings()
    ceiling_mb = settings.runner_max_rss_mb or memory_limit_mb(matrix) or 8192
    return max(1, min(cores, _available_memory_mb() // ceiling_mb))


def thread_limits(runners: int) -> dict[str, str]:
    """Each runner's share of the cores for the frameworks' own thread pools.

    Set when several runners check at once: torch's and BLAS's threads and XLA's intra-op pool would
    otherwise each claim every core and contend (nothing set with one runner: the frameworks' defaults).
    """
    if runners <= 1:
        return {}
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    share = str(max(1, cores // runners))
    return {"OMP_NUM_THREADS": share, "MKL_NUM_THREADS": share, "OPENBLAS_NUM_THREADS": share}


def _available_memory_mb() -> int:
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) // 1024
    except OSError:
        pass
    return 1 << 30  # unknown: memory does not bound it


def cell_of(record: dict[str, Any]) -> Cell:
    """A runner's record (which may carry a fingerprint, and an error cell fewer fields) as a Cell."""
    return Cell(**{name: record[name] for name in FIELD_NAMES if name in record})
