"""Mechanical variants of base scenarios, derived by function as DifferentiationInterfaceTest does.

- closure: the constant data a function receives as contexts is captured instead; the backends then
  see a one-argument function whose constants they never converted, which is where device and dtype
  mix-ups hide.
- batched: three tangents (or cotangents) at once, as DifferentiationInterface's batched pushforwards
  and pullbacks take them; a backend that vmaps over them must give what it gives one at a time.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping

from gradci.scenarios.authoring.scenario import Scenario, Tangents
from gradci.scenarios.library._common import derived, draw_like, like, rng, tangent_structure
from gradci.scenarios.operators.records import OPERATOR_RECORDS

BATCH = 3


def _close_over(fn: Callable, contexts: tuple) -> Callable:
    def closed(x):
        return fn(x, *like(contexts, x))

    return derived(closed, fn)


def with_closure(scenario: Scenario) -> Scenario:
    """The same scenario with its contexts captured in a closure rather than passed."""
    if not scenario.contexts:
        raise ValueError(f"scenario {scenario.name!r} has no contexts to capture")
    f = scenario.f
    closed = ({key: _close_over(fn, scenario.contexts) for key, fn in f.items()} if isinstance(f, Mapping)
              else _close_over(f, scenario.contexts))
    return dataclasses.replace(scenario, name=f"{scenario.name}/closure", f=closed, contexts=(),
                               tags=scenario.tags + ("variant:closure",))


def with_batched_tangents(scenario: Scenario, count: int = BATCH) -> Scenario:
    """The same scenario applied to ``count`` tangents drawn from a seed named after it."""
    if not OPERATOR_RECORDS[scenario.operator].takes_tangent_or_cotangent:
        raise ValueError(f"scenario {scenario.name!r}: {scenario.operator} takes no tangent")
    g = rng(f"{scenario.name}/batched")
    structure = tangent_structure(scenario)
    first = [scenario.tangent] if scenario.tangent is not None and not isinstance(scenario.tangent, Tangents) else []
    drawn = [draw_like(structure, g) for _ in range(count - len(first))]
    return dataclasses.replace(scenario, name=f"{scenario.name}/batched", tangent=Tangents(first + drawn),
                               tags=scenario.tags + ("variant:batched",))


def derive(base: Iterable[Scenario]) -> list[Scenario]:
    """Every variant that applies to each base scenario.

    Closures where there are contexts, batched tangents where the operator takes one.
    """
    out = []
    for scenario in base:
        if scenario.contexts:
            out.append(with_closure(scenario))
        if (OPERATOR_RECORDS[scenario.operator].takes_tangent_or_cotangent
                and not isinstance(scenario.tangent, Tangents)):
            out.append(with_batched_tangents(scenario))
    return out
