"""Planning a run: which cells it checks, cut into jobs. Pure functions, no database, no queue.

One job is one backend × one device × a chunk of scenarios, so that a worker keeps one framework
and one device warm for the whole job and a crash or a redelivery costs one chunk, not the run.
A job's dtypes are not stored with it: both the planner and the worker derive them from the run's
matrix and each scenario's declared dtypes with ``cell_dtypes``, the same rule ``gradci check``
follows (a dtype the run asks for but the scenario does not declare is a ``skip`` cell).

Device requirements (``gradci.scenarios.contract.requirements``) route GPU jobs: the scenarios of a CUDA device are
grouped by the queue that can take them (``route``) before they are chunked, and a scenario whose
every cell no device of its kind could ever run (a requirement on ``cpu``, capability 9.0 on
``cuda.sm80``) is left out of the jobs and planned as ``skip`` cells with the reason.
"""
from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any

from gradci.scenarios.contract.devices import CPU, CUDA, validate_device
from gradci.scenarios.contract.matrix import Matrix, select_scenarios
from gradci.scenarios.contract.requirements import DeviceOffer, Requirements, capability_number, needs, unmet
from gradci.services.broker.queues import queue_for_device
from gradci.services.job_balance import Costs, Risk, cut_by_cost, riskiest_first, target_seconds


class PlanError(ValueError):
    """The run cannot be planned as asked (unknown backend, no matching scenario...)."""


@dataclasses.dataclass(frozen=True)
class ScenarioInfo:
    """What the planner needs to know of a scenario (the runner lists them; no code is imported here)."""

    name: str
    operator: str = ""
    dtypes: tuple[str, ...] = ("float64", "float32")
    tags: tuple[str, ...] = ()
    fingerprint: str | None = None
    requirements: Requirements = Requirements()
    lacks: tuple[str, ...] = ()  # frameworks it gives no f for: their backends get no cell of it
    file: str | None = None  # where its Scenario(...) call is, relative to the repository
    line: int | None = None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ScenarioInfo:
        return cls(name=data["name"], operator=data.get("operator", ""), dtypes=tuple(data.get("dtypes", ())),
                   tags=tuple(data.get("tags", ())), fingerprint=data.get("fingerprint"),
                   requirements=Requirements.from_dict(data.get("requirements")), lacks=tuple(data.get("lacks", ())),
                   file=data.get("file"), line=data.get("line"))

    def has_cells_for(self, scope: BackendScope | None) -> bool:
        """Whether a backend of this scope (None: not known) gets cells of this scenario."""
        if scope is None:
            return True
        return scope.framework not in self.lacks and (scope.operators is None or self.operator in scope.operators)


@dataclasses.dataclass(frozen=True)
class BackendScope:
    """Which scenarios a backend has cells of: those giving f for its framework, of its operators.

    ``operators`` None: every operator (a second-order-only backend names its own).
    """

    framework: str | None = None
    operators: tuple[str, ...] | None = None


@dataclasses.dataclass(frozen=True)
class JobSpec:
    backend: str
    device: str
    queue: str
    scenarios: tuple[str, ...]
    # What its cells are expected to take (seconds, from an earlier run's timings); None: not known.
    cost_s: float | None = None


@dataclasses.dataclass(frozen=True)
class Skipped:
    """A scenario's cells on one device that no device of that name could ever run.

    They are planned as ``skip`` cells (in every backend of the run) with the reason, never sent to a
    worker.
    """

    scenario: str
    device: str
    dtypes: tuple[str, ...]
    reason: str


@dataclasses.dataclass(frozen=True)
class Plan:
    matrix: Matrix
    scenarios: tuple[ScenarioInfo, ...]
    jobs: tuple[JobSpec, ...]
    skipped: tuple[Skipped, ...] = ()
    omitted: int = 0  # cells not made: backends of a framework a scenario gives no f for, or of other operators

    @property
    def cell_count(self) -> int:
        dtypes = {info.name: info.dtypes for info in self.scenarios}
        return sum(len(cell_dtypes(dtypes[name], self.matrix.dtypes)) for job in self.jobs for name in job.scenarios)


def cell_dtypes(declared: Sequence[str], requested: Sequence[str] | None) -> tuple[str, ...]:
    """The dtypes of a scenario's cells: the requested ones, or the scenario's own."""
    return tuple(requested) if requested is not None else tuple(declared)


def resolve_matrix(
    run_matrix: Matrix,
    file_matrix: Matrix,
    *,
    available_backends: Sequence[str],
    known_backends: Sequence[str],
    default_devices: Sequence[str] = (CPU,),
) -> Matrix:
    """The run's request over the repository's gradci.toml, with backends and devices filled in.

    Every available backend and the default devices where neither says. ``dtypes`` stays None when
    neither says (each scenario's own dtypes). Unknown backends or devices are a ``PlanError``.
    """
    wanted = file_matrix.overridden(run_matrix)
    backends = wanted.backends or tuple(available_backends)
    unknown = [name for name in backends if name not in known_backends]
    if unknown:
        raise PlanError(f"unknown backend {unknown[0]!r}; known: {', '.join(known_backends)}")
    if not backends:
        raise PlanError("no backend is available on the workers")
    devices = wanted.devices or tuple(dict.fromkeys(default_devices))
    try:
        for device in devices:
            validate_device(device)
    except ValueError as exc:
        raise PlanError(str(exc)) from None
    return dataclasses.replace(wanted, backends=backends, devices=devices)


def chunked(items: Sequence[str], size: int) -> Iterable[tuple[str, ...]]:
    if size < 1:
        raise ValueError("chunk size must be at least 1")
    for start in range(0, len(items), size):
        yield tuple(items[start:start + size])


@dataclasses.dataclass(frozen=True)
class GpuWorkers:
    """The GPUs of the workers table, for routing.

    Those of workers online now, and those of every worker seen (online or not).
    """

    online: tuple[DeviceOffer, ...] = ()
    known: tuple[DeviceOffer, ...] = ()


def route(need: Requirements, device: str, gpus: GpuWorkers) -> str:
    """The queue for a job of ``device`` whose scenarios need ``need``.

    ``need`` is what ``gradci.scenarios.contract.requirements.needs`` gives.

    Without a need: the device's own queue. With one: ``cuda.smXY`` of the lowest capability whose
    workers all meet it (those online, else those seen before), leaving bigger GPUs to whoever needs
    them; a run's ``cuda.smXY`` only considers XY. No queue encodes memory, so a memory need is met
    only through that choice: when no capability's workers all have the memory, the job is parked
    on a queue no worker consumes (``parked_queue``), where it waits as any unserved job does.
    """
    fixed = DeviceOffer.of_device(device).capability
    if not need or device == CPU:
        return queue_for_device(device)
    floor = capability_number(need.min_capability or "0")
    for pool in (gpus.online, gpus.known):
        capabilities = sorted({g.capability for g in pool if g.capability and capability_number(g.capability) >= floor},
                              key=capability_number)
        for capability in capabilities if fixed is None else [fixed]:
            workers = [g for g in pool if g.capability == capability]
            if workers and all(unmet(need, g) is None for g in workers):
                return f"{CUDA}.sm{capability}"
    if need.min_memory_bytes:
        return parked_queue(dataclasses.replace(need, min_capability=fixed or need.min_capability))
    return f"{CUDA}.sm{fixed or need.min_capability}"


PARKED = re.compile(r"^(?P<base>cuda(?:\.sm\d{2,3})?)\.mem(?P<gb>\d+)GB$")


def parked_queue(need: Requirements) -> str:
    """A queue named for a need no worker was seen to meet: ``cuda.mem100GB``, ``cuda.sm90.mem100GB``.

    No worker consumes it: its jobs wait, visibly, until GRADCI_DEVICE_WAIT ends their wait.
    """
    base = f"{CUDA}.sm{need.min_capability}" if need.min_capability else CUDA
    return f"{base}.mem{math.ceil((need.min_memory_bytes or 0) / 10**9)}GB"


def queue_description(queue: str) -> str:
    """The worker a queue waits for, in words: "a cuda.sm90 worker", "a cuda worker with 100 GB of memory"."""
    parked = PARKED.match(queue)
    if parked:
        return f"a {parked['base']} worker with {parked['gb']} GB of memory"
    return f"a {queue} worker"


def never_runs(info: ScenarioInfo, device: str, dtypes: Sequence[str]) -> str | None:
    """Why none of a scenario's cells could ever run on a run's ``device`` (None: some could).

    Only what the name promises counts: ``cuda`` and ``cuda:N`` may be any GPU.
    """
    offer = DeviceOffer.of_device(device)
    reasons = [unmet(info.requirements, offer, dtype) for dtype in dtypes or (None,)]
    return reasons[0] if reasons and all(reasons) else None


def job_specs(runnable: Mapping[str, Sequence[ScenarioInfo]], matrix: Matrix, chunk_size: int,
              gpus: GpuWorkers = GpuWorkers(), scopes: Mapping[str, BackendScope] | None = None,
              costs: Costs | None = None, risk: Risk | None = None) -> list[JobSpec]:
    """The jobs: device × backend × chunks of the scenarios that can run on the device.

    The scenarios of a device are first grouped by the queue their needs route them to. ``scopes``
    (backend → what it has cells of) leaves out the scenarios a backend has no cells of. Without
    ``costs`` every job holds ``chunk_size`` scenarios, in a stable order; with them, jobs are cut at
    the run's target cost and ordered longest first. ``risk`` orders before either: the scenarios
    likeliest to fail first in their group, the jobs holding them first (``gradci.services.job_balance``).
    """
    groups = _groups(runnable, matrix, gpus, scopes or {})
    if risk is not None:
        groups = [(backend, device, queue, risk.riskiest_first(names, backend, device))
                  for backend, device, queue, names in groups]
    if costs is None:
        specs = [JobSpec(backend=backend, device=device, queue=queue, scenarios=chunk)
                 for backend, device, queue, names in groups for chunk in chunked(names, chunk_size)]
    else:
        seconds = [costs.of(names, backend, device) for backend, device, _, names in groups]
        target = target_seconds(sum(map(sum, seconds)), costs.workers)
        specs = [JobSpec(backend=backend, device=device, queue=queue, scenarios=piece, cost_s=cost)
                 for (backend, device, queue, names), group_seconds in zip(groups, seconds)
                 for piece, cost in cut_by_cost(names, group_seconds, target, chunk_size)]
    tiers = [min(risk.of(spec.scenarios, spec.backend, spec.device)) if risk else 0 for spec in specs]
    return [specs[i] for i in riskiest_first(tiers, [spec.cost_s or 0.0 for spec in specs])]


def _groups(runnable: Mapping[str, Sequence[ScenarioInfo]], matrix: Matrix, gpus: GpuWorkers,
            scope_of: Mapping[str, BackendScope]) -> list[tuple[str, str, str, list[str]]]:
    """(backend, device, queue, scenario names) of each group of scenarios a job may hold, in a stable order."""
    assert matrix.devices is not None and matrix.backends is not None, "a resolved matrix"
    groups = []
    for device in matrix.devices:
        queues: dict[str, list[ScenarioInfo]] = {}
        for info in runnable.get(device, ()):
            need = needs(info.requirements, cell_dtypes(info.dtypes, matrix.dtypes))
            queues.setdefault(route(need, device, gpus), []).append(info)
        for backend in matrix.backends:
            for queue, infos in queues.items():
                names = [info.name for info in infos if info.has_cells_for(scope_of.get(backend))]
                if names:
                    groups.append((backend, device, queue, names))
    return groups


def omitted_cells(runnable: Mapping[str, Sequence[ScenarioInfo]], matrix: Matrix,
                  scopes: Mapping[str, BackendScope]) -> int:
    """How many cells ``job_specs`` leaves out.

    They are a backend × device × dtype of each scenario that gives no f for the backend's framework,
    or whose operator the backend does not compute.
    """
    assert matrix.backends is not None, "a resolved matrix"
    return sum(len(cell_dtypes(info.dtypes, matrix.dtypes)) for infos in runnable.values() for info in infos
               for backend in matrix.backends if not info.has_cells_for(scopes.get(backend)))


def split_runnable(scenarios: Sequence[ScenarioInfo], matrix: Matrix) -> tuple[dict[str, list[ScenarioInfo]],
                                                                                list[Skipped]]:
    """Per device, the scenarios some cell of which can run there; and the others, skipped with why."""
    runnable: dict[str, list[ScenarioInfo]] = {}
    skipped = []
    assert matrix.devices is not None, "a resolved matrix"
    for device in matrix.devices:
        for info in scenarios:
            dtypes = cell_dtypes(info.dtypes, matrix.dtypes)
            reason = never_runs(info, device, dtypes)
            if reason is None:
                runnable.setdefault(device, []).append(info)
            else:
                skipped.append(Skipped(info.name, device, dtypes, reason))
    return runnable, skipped


def divide_into_jobs(
    scenarios: Sequence[ScenarioInfo],
    *,
    run_matrix: Matrix,
    file_matrix: Matrix,
    available_backends: Sequence[str],
    known_backends: Sequence[str],
    default_devices: Sequence[str] = (CPU,),
    chunk_size: int = 25,
    gpus: GpuWorkers = GpuWorkers(),
    scopes: Mapping[str, BackendScope] | None = None,
    costs: Costs | None = None,
    risk: Risk | None = None,
) -> Plan:
    """The whole plan of a run from the scenarios its checkout lists, routed by what ``gpus`` offer.

    A run none of whose cells could ever run is a ``PlanError`` giving the first reason.
    """
    matrix = resolve_matrix(run_matrix, file_matrix, available_backends=available_backends,
                            known_backends=known_backends, default_devices=default_devices)
    patterns = matrix.scenarios
    chosen = select_scenarios(scenarios, patterns)
    if not chosen:
        raise PlanError(f"no scenario matches {', '.join(patterns)}" if patterns else
                        "the repository declares no scenario")
    runnable, skipped = split_runnable(chosen, matrix)
    jobs = job_specs(runnable, matrix, chunk_size, gpus, scopes, costs, risk)
    if not jobs:
        if not skipped:
            raise PlanError(f"no backend of {', '.join(matrix.backends or ())} checks the chosen scenarios: "
                            "they give f for other frameworks only, or are of operators those backends do not compute")
        first = skipped[0]
        raise PlanError(f"no cell of this run can ever run: scenario {first.scenario!r} {first.reason}")
    return Plan(matrix=matrix, scenarios=tuple(chosen), jobs=tuple(jobs), skipped=tuple(skipped),
                omitted=omitted_cells(runnable, matrix, scopes or {}))


def without_groups(plan: Plan, groups: Collection[tuple[str, str, str]]) -> Plan:
    """``plan`` without the cells of ``groups`` (scenario, backend, device), carried from a base run.

    The jobs keep their order, backend, device and queue; each loses the excluded scenarios, and a job
    left with none is dropped (every cell of a run may be carried: it then has no job). Jobs of a
    group left smaller are not merged: a job's cost is its cells', whatever they are.
    """
    if not groups:
        return plan
    excluded = set(groups)
    jobs = []
    for job in plan.jobs:
        kept = tuple(name for name in job.scenarios if (name, job.backend, job.device) not in excluded)
        if kept == job.scenarios:
            jobs.append(job)
        elif kept:
            share = len(kept) / len(job.scenarios)
            jobs.append(dataclasses.replace(job, scenarios=kept,
                                            cost_s=job.cost_s * share if job.cost_s is not None else None))
    return dataclasses.replace(plan, jobs=tuple(jobs))


def job_cells(job_scenarios: Sequence[str], declared_dtypes: Mapping[str, Sequence[str]],
              requested_dtypes: Sequence[str] | None) -> list[tuple[str, str]]:
    """(scenario, dtype) of each cell a job checks.

    A scenario the checkout no longer declares keeps its name with no dtype known: the worker reports it
    as an error cell in each requested dtype, or in float64 when the run asked for none.
    """
    cells: list[tuple[str, str]] = []
    for name in job_scenarios:
        declared = declared_dtypes.get(name)
        if declared is None:
            cells.extend((name, dtype) for dtype in (requested_dtypes or ("float64",)))
        else:
            cells.extend((name, dtype) for dtype in cell_dtypes(declared, requested_dtypes))
    return cells
