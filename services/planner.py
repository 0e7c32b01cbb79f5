"""Planning a run: which cells it checks, cut into jobs. Pure functions, no database, no queue.

One job is one backend × one device × a chunk of scenarios, so that a worker keeps one framework
and one device warm for the whole job and a crash or a redelivery costs one chunk, not the run.
A job's dtypes are not stored with it: both the planner and the worker derive them from the run's
matrix and each scenario's declared dtypes with ``cell_dtypes``, the same rule ``gradci check``
follows (a dtype the run asks for but the scenario does not declare is a ``skip`` cell).
"""
from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from scenarios.devices import CPU, validate_device
from scenarios.matrix import Matrix, select_scenarios
from services.queues import queue_for_device


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

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ScenarioInfo:
        return cls(name=data["name"], operator=data.get("operator", ""), dtypes=tuple(data.get("dtypes", ())),
                   tags=tuple(data.get("tags", ())), fingerprint=data.get("fingerprint"))


@dataclasses.dataclass(frozen=True)
class JobSpec:
    backend: str
    device: str
    queue: str
    scenarios: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class Plan:
    matrix: Matrix
    scenarios: tuple[ScenarioInfo, ...]
    jobs: tuple[JobSpec, ...]

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
    """The run's request over the repository's gradci.toml, with backends and devices filled in:
    every available backend and the default devices where neither says. ``dtypes`` stays None
    when neither says (each scenario's own dtypes). Unknown backends or devices are a ``PlanError``."""
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


def job_specs(scenarios: Sequence[ScenarioInfo], matrix: Matrix, chunk_size: int) -> list[JobSpec]:
    """device × backend × chunks of scenarios, in a stable order."""
    names = [info.name for info in scenarios]
    return [
        JobSpec(backend=backend, device=device, queue=queue_for_device(device), scenarios=chunk)
        for device in matrix.devices
        for backend in matrix.backends
        for chunk in chunked(names, chunk_size)
    ]


def plan_run(
    scenarios: Sequence[ScenarioInfo],
    *,
    run_matrix: Matrix,
    file_matrix: Matrix,
    available_backends: Sequence[str],
    known_backends: Sequence[str],
    default_devices: Sequence[str] = (CPU,),
    chunk_size: int = 25,
) -> Plan:
    """The whole plan of a run from the scenarios its checkout lists."""
    matrix = resolve_matrix(run_matrix, file_matrix, available_backends=available_backends,
                            known_backends=known_backends, default_devices=default_devices)
    patterns = matrix.scenarios
    chosen = select_scenarios(scenarios, patterns)
    if not chosen:
        raise PlanError(f"no scenario matches {', '.join(patterns)}" if patterns else
                        "the repository declares no scenario")
    return Plan(matrix=matrix, scenarios=tuple(chosen), jobs=tuple(job_specs(chosen, matrix, chunk_size)))


def job_cells(job_scenarios: Sequence[str], declared_dtypes: Mapping[str, Sequence[str]],
              requested_dtypes: Sequence[str] | None) -> list[tuple[str, str]]:
    """(scenario, dtype) of each cell a job checks. A scenario the checkout no longer declares
    keeps its name with no dtype known: the worker reports it as an error cell in each requested
    dtype, or in float64 when the run asked for none."""
    cells = []
    for name in job_scenarios:
        declared = declared_dtypes.get(name)
        if declared is None:
            cells.extend((name, dtype) for dtype in (requested_dtypes or ("float64",)))
        else:
            cells.extend((name, dtype) for dtype in cell_dtypes(declared, requested_dtypes))
    return cells
