"""The second point a prepared program is run at: the scenario's declared one, or one drawn near x.

DifferentiationInterfaceTest prepares an operator at one input and runs it at another: a compiled tape
that kept the first input's branch, or a constant not re-zeroed between calls, shows only there. The
driver runs a cell's prepared program at x, at the second point x₁, and at x again, each against its
own reference; this module says where x₁ is and makes the scenario at x₁ whose reference is x₁'s (the
reference cache keeps it like any other, by fingerprint).

A drawn x₁ moves each element of x by a relative 2.5 to 5 % (seeded by the scenario's fingerprint), so
it keeps each element's sign and stays inside a domain that x is well inside: f's branches are those
of x. A point in another branch, or a smaller input, is the author's to declare (``second_point``).
"""
from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import optree

from gradci.scenarios.authoring.scenario import Scenario, Tangents

# The largest relative move of an element of x; the smallest is half of it (a move that small is still
# far above float32's rounding, so x₁'s derivative differs from x's wherever f's derivative varies).
SPREAD = 0.05


def second_point_of(scenario: Scenario) -> Any | None:
    """The scenario's declared second point, else one drawn near x; None where nothing can move x.

    A drawn point moves every nonzero element by a relative 2.5–5 %, up or down, seeded by the
    scenario's fingerprint. Zeros stay zeros (a relative move cannot leave a domain edge at 0): an x of
    zeros only has no second point drawn.
    """
    if scenario.second_point is not None:
        return scenario.second_point
    leaves, spec = optree.tree_flatten(scenario.x, none_is_leaf=True)
    if not any(np.any(leaf != 0) for leaf in leaves):
        return None
    g = np.random.default_rng(int(scenario.fingerprint()[:8], 16))
    moved = [leaf * (1 + SPREAD * g.uniform(0.5, 1.0, np.shape(leaf)) * g.choice((-1.0, 1.0), np.shape(leaf)))
             for leaf in leaves]
    return optree.tree_unflatten(spec, moved)


def smaller(scenario: Scenario, point: Any) -> bool:
    """Whether ``point`` has other (smaller) shapes than the scenario's x."""
    shapes = [np.shape(leaf) for leaf in optree.tree_leaves(point, none_is_leaf=True)]
    return shapes != [np.shape(leaf) for leaf in optree.tree_leaves(scenario.x, none_is_leaf=True)]


def described(scenario: Scenario, point: Any) -> str:
    """What x₁ is, for a cell's message."""
    if scenario.second_point is None:
        return f"x moved by {SPREAD / 2:.1%}–{SPREAD:.0%}"
    return "the declared second_point, smaller" if smaller(scenario, point) else "the declared second_point"


def at_second_point(scenario: Scenario, tangent: Any) -> Scenario | str:
    """The scenario at its second point, or why there is none.

    ``tangent`` is the one the cells at x use; at a point of x's shapes the program is run with it
    again, at a smaller one the reference draws one. Made once per scenario and kept on it, so that its
    fingerprint (the reference cache's key) is computed once too. An exact reference (an array) holds
    at x only: x₁'s is then made by finite differences.
    """
    kept = scenario.__dict__.get("_at_second_point")
    if kept is not None:
        return kept
    point = second_point_of(scenario)
    if point is None:
        made: Scenario | str = "x is zero, and a relative move leaves it so (declare second_point)"
    elif smaller(scenario, point) and isinstance(tangent, Tangents):
        made = "a smaller input with batched tangents is not run (declare one of x's shapes)"
    else:
        made = dataclasses.replace(
            scenario, name=f"{scenario.name}@second-point", x=point,
            tangent=None if smaller(scenario, point) else tangent,
            reference=scenario.reference if callable(scenario.reference) else None,
            second_point=None, xfail=(), skip=())
    scenario.__dict__["_at_second_point"] = made
    return made
