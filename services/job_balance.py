"""Cutting a run's jobs by what their cells cost, so that its last job ends when the workers run dry.

Cut by count alone (``chunk_size`` scenarios a job), one job of slow scenarios — a family of large
networks, a Hessian of a simulator — decides when the run ends while the other workers wait idle.
Given the seconds each scenario's cells took in an earlier run of the repository
(``gradci.services.db.cell_costs``), the planner cuts a job when it reaches the run's target — its
whole cost over ``JOBS_PER_WORKER`` jobs per job slot online (a worker of concurrency 4 is four),
never under ``MIN_JOB_S``, since claiming a job, checking out and warming a runner cost about that —
and sends the jobs longest first. That is the longest-processing-time rule: a worker that frees up
takes the longest job left, and the short ones fill the end, within 4/3 of the best possible finish
(Graham, 1969).

A scenario no earlier run timed is planned at the median cost of those that were timed (when in
doubt, typical); without any timing the jobs are cut by count, in the planner's stable order.
Jobs keep their scenarios in the listed order, so that scenarios of one function stay together in
one warm runner.

Before cost comes risk (``Risk``): the cells likeliest to fail run first, so that a pull request's
first failure is known, and shown on its check run, long before its last cell. First the cells of
scenarios that reached a derivative rule the change touches (the earlier run's rule coverage says
which), then those that failed or nearly failed there (an error within ``NEAR_FAILURE`` of its
tolerance), then the rest. Within a group the risky scenarios move to the front before it is cut,
so they share the first jobs; jobs go riskiest first, then longest first.
"""
from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

JOBS_PER_WORKER = 4  # per job slot: enough pieces that the longest-first order can even out their ends
MIN_JOB_S = 2.0  # below this a job's own overhead (claim, checkout, warm runner) is most of it
UNTIMED_S = 1.0  # what a scenario costs when no scenario of the run was timed on its backend

CostKey = tuple[str, str, str]  # (scenario, backend, device kind: "cpu", "cuda")

# Risk tiers, likeliest to fail first.
CHANGED_RULE = 0  # the scenario's cells reached a rule whose source the change touched
FAILED_BEFORE = 1  # they failed, errored or nearly failed in the earlier run
UNREMARKABLE = 2
NEAR_FAILURE = 0.5  # an error at least this share of its tolerance is a near failure


def device_kind(device: str) -> str:
    """"cuda" for ``cuda``, ``cuda:1``; "cpu" for ``cpu``: timings carry over between GPUs of a run."""
    return device.split(":", 1)[0]


@dataclasses.dataclass(frozen=True)
class Costs:
    """Seconds each scenario's cells took, per backend and kind of device, and the job slots to share them.

    ``workers``: the jobs the online workers run at once (each worker's concurrency, summed).
    """

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


@dataclasses.dataclass(frozen=True)
class Risk:
    """Each scenario's risk tier (``CHANGED_RULE``, ``FAILED_BEFORE``), per backend and kind of device.

    A scenario not named is ``UNREMARKABLE``.
    """

    tiers: Mapping[CostKey, int]

    @classmethod
    def of_earlier_run(cls, reached_changed: Iterable[CostKey], failed: Iterable[CostKey]) -> Risk:
        """From the earlier run: the cells that reached a changed rule, those that (nearly) failed."""
        tiers = dict.fromkeys(_kinds(failed), FAILED_BEFORE)
        tiers.update(dict.fromkeys(_kinds(reached_changed), CHANGED_RULE))
        return cls(tiers)

    def of(self, names: Sequence[str], backend: str, device: str) -> list[int]:
        kind = device_kind(device)
        return [self.tiers.get((name, backend, kind), UNREMARKABLE) for name in names]

    def riskiest_first(self, names: Sequence[str], backend: str, device: str) -> list[str]:
        """``names`` likeliest to fail first; in their listed order within a tier."""
        tiers = self.of(names, backend, device)
        return [names[i] for i in sorted(range(len(names)), key=tiers.__getitem__)]


def _kinds(keys: Iterable[CostKey]) -> Iterator[CostKey]:
    return ((scenario, backend, device_kind(device)) for scenario, backend, device in keys)


def changed_rules(rules: Iterable[Mapping[str, Any]], earlier: Mapping[str, Iterable[Mapping[str, Any]]]) -> set[str]:
    """The ids of ``rules`` (``Rule.to_dict``) whose methods or their sources differ from ``earlier``'s.

    ``earlier``: rule id → its methods, in the earlier run. A rule the earlier run did not know reached
    no cell there, so only rules both know can be changed ones.
    """
    def digests(methods: Iterable[Mapping[str, Any]]) -> dict[str, str]:
        return {str(method["name"]): str(method.get("digest") or "") for method in methods}

    return {str(rule["id"]) for rule in rules
            if str(rule["id"]) in earlier and digests(rule["methods"]) != digests(earlier[str(rule["id"])])}


def riskiest_first(tiers: Sequence[int], costs: Sequence[float]) -> list[int]:
    """The order jobs are sent in: the indices by risk tier, then costliest first; ties keep their order."""
    return sorted(range(len(costs)), key=lambda i: (tiers[i], -costs[i]))
