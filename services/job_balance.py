"""Cutting a run's jobs by what their cells cost, so that its last job ends when the workers run dry.

Cut by count alone (``chunk_size`` scenarios a job), one job of slow scenarios — a family of large
networks, a Hessian of a simulator — decides when the run ends while the other workers wait idle.
Given the seconds each scenario's cells took in an earlier run of the repository
(``gradci.services.db.cell_costs``), the planner cuts a job when it reaches the run's target — its
whole cost over ``JOBS_PER_WORKER`` jobs per worker, never under ``MIN_JOB_S``, since claiming a job,
checking out and warming a runner cost about that — and sends the jobs longest first. That is the
longest-processing-time rule: a worker that frees up takes the longest job left, and the short
ones fill the end, within 4/3 of the best possible finish (Graham, 1969).

A scenario no earlier run timed is planned at the median cost of those that were timed (when in
doubt, typical); without any timing the jobs are cut by count, in the planner's stable order.
Jobs keep their scenarios in the listed order, so that scenarios of one function stay together in
one warm runner.
"""
from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Mapping, Sequence

JOBS_PER_WORKER = 4  # enough pieces that the longest-first order can even out the workers' ends
MIN_JOB_S = 2.0  # below this a job's own overhead (claim, checkout, warm runner) is most of it
UNTIMED_S = 1.0  # what a scenario costs when no scenario of the run was timed on its backend

CostKey = tuple[str, str, str]  # (scenario, backend, device kind: "cpu", "cuda")


def device_kind(device: str) -> str:
    """"cuda" for ``cuda``, ``cuda:1``; "cpu" for ``cpu``: timings carry over between GPUs of a run."""
    return device.split(":", 1)[0]


@dataclasses.dataclass(frozen=True)
class Costs:
    """Seconds each scenario's cells took, per backend and kind of device, and the workers to share them."""

    seconds: Mapping[CostKey, float]
    workers: int = 1

    def of(self, names: Sequence[str], backend: str, device: str) -> list[float]:
        """Each scenario's seconds on ``backend`` × ``device``; the untimed at the median of the timed."""
        kind = device_kind(device)
        known = [self.seconds.get((name, backend, kind)) for name in names]
        timed = [s for s in known if s is not None]
        typical = statistics.median(timed) if timed else self.typical(backend, kind)
        return [typical if s is None else s for s in known]

    def typical(self, backend: str, kind: str) -> float:
        timed = [s for (_, b, k), s in self.seconds.items() if b == backend and k == kind]
        return statistics.median(timed) if timed else UNTIMED_S


def target_seconds(total_s: float, workers: int) -> float:
    """How long one job should take: the run's cost over ``JOBS_PER_WORKER`` jobs a worker."""
    return max(MIN_JOB_S, total_s / (JOBS_PER_WORKER * max(1, workers)))


def cut_by_cost(names: Sequence[str], seconds: Sequence[float], target_s: float,
                max_size: int) -> list[tuple[tuple[str, ...], float]]:
    """Consecutive runs of ``names`` of about ``target_s`` each (at most ``max_size``), with their cost.

    A scenario costlier than the target is a job of its own.
    """
    if max_size < 1:
        raise ValueError("chunk size must be at least 1")
    pieces: list[tuple[tuple[str, ...], float]] = []
    current: list[str] = []
    cost = 0.0
    for name, s in zip(names, seconds):
        if current and (cost + s > target_s or len(current) == max_size):
            pieces.append((tuple(current), cost))
            current, cost = [], 0.0
        current.append(name)
        cost += s
    if current:
        pieces.append((tuple(current), cost))
    return pieces


def longest_first(costs: Sequence[float]) -> list[int]:
    """The indices of ``costs``, costliest first; equal costs keep their order."""
    return sorted(range(len(costs)), key=lambda i: -costs[i])
