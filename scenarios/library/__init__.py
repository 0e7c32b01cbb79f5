"""gradci's built-in scenario library: one module per family, variants derived mechanically.

``default()`` is every scenario the library holds except the large ones and the suites of their own
(the framework conformance family, torch's own modules); ``family(name)`` is one family's;
``select(...)`` filters by tag; ``mlp_100k()`` is the large MLP the benchmark uses; ``demo_runs()``
splits default() for the demo.
Names are "family/what/operator[/variant]" and every scenario is tagged with its family.
Neither torch nor jax is imported here: per-framework callables import their framework when called.
"""
from __future__ import annotations

from collections.abc import Iterable

from gradci.scenarios.authoring.scenario import Scenario
from gradci.scenarios.library import complex_numbers, control, delicate, elementary, linalg, nn, pytrees, sparse
from gradci.scenarios.library import conformance as frameworks
from gradci.scenarios.library.conformance import torch_modules
from gradci.scenarios.library.nn import mlp_100k
from gradci.scenarios.library.variants import derive, with_batched_tangents, with_closure

FAMILIES = {
    elementary.FAMILY: elementary,
    pytrees.FAMILY: pytrees,
    nn.FAMILY: nn,
    linalg.FAMILY: linalg,
    control.FAMILY: control,
    delicate.FAMILY: delicate,
    sparse.FAMILY: sparse,
    complex_numbers.FAMILY: complex_numbers,
    frameworks.FAMILY: frameworks,
    torch_modules.FAMILY: torch_modules,
}
# Families run on their own, by name (`gradci check --family frameworks`): not part of default(), whose
# time is the demo suite's, and without derived variants.
OWN_SUITES = {frameworks.FAMILY, torch_modules.FAMILY}


def base() -> list[Scenario]:
    """The hand-written scenarios of every family but the suites of their own, before variants."""
    return [scenario for name, module in FAMILIES.items() if name not in OWN_SUITES
            for scenario in module.scenarios()]


def family(name: str) -> list[Scenario]:
    """One family's scenarios: its own and, except for the suites of their own, its derived variants."""
    if name not in FAMILIES:
        raise ValueError(f"unknown scenario family {name!r}; expected one of {', '.join(FAMILIES)}")
    scenarios = FAMILIES[name].scenarios()
    return scenarios if name in OWN_SUITES else scenarios + derive(scenarios)


def default() -> list[Scenario]:
    """Every scenario of the library except those tagged "large", variants included."""
    scenarios = base()
    return scenarios + derive(scenarios)


def demo_runs() -> list[tuple[str, ...]]:
    """default() as the scenario patterns of two runs.

    The neural-network family's first (a finished run to look at within two minutes on 2 cores, cold),
    then every other family's.
    """
    rest = [name for name in FAMILIES if name not in OWN_SUITES and name != nn.FAMILY]
    return [(f"{nn.FAMILY}/*",), tuple(f"{name}/*" for name in rest)]


def everything() -> list[Scenario]:
    """default() plus the large scenarios."""
    return default() + [mlp_100k()]


def select(include: str | Iterable[str] = (), exclude: str | Iterable[str] = (),
           scenarios: Iterable[Scenario] | None = None) -> list[Scenario]:
    """Scenarios carrying every tag in ``include`` and none in ``exclude`` (from ``everything()`` by default).

    >>> [s.name for s in select(["linalg", "second-order"], exclude="variant:batched")][:1]
    ['linalg/solve/hvp']
    """
    include = {include} if isinstance(include, str) else set(include)
    exclude = {exclude} if isinstance(exclude, str) else set(exclude)
    pool = everything() if scenarios is None else scenarios
    return [s for s in pool if include <= set(s.tags) and not exclude & set(s.tags)]


def by_name(name: str) -> Scenario:
    for scenario in everything():
        if scenario.name == name:
            return scenario
    raise KeyError(name)


__all__ = ["FAMILIES", "OWN_SUITES", "base", "default", "family", "demo_runs", "everything", "select", "by_name",
           "mlp_100k", "derive", "with_closure", "with_batched_tangents"]
