"""Whether finite differences can decide at all: the reference's value at several fixed steps.

A smooth f gives the same derivative at every step from 1e-2 to 1e-5 (a fourth-order stencil's
truncation and rounding errors are far below any tolerance there), so estimates that wander with the
step mean f is noisy at that scale — an iterative solver's tolerance, a random sample, a jagged
approximation — and Richardson's own error estimate, taken from the last steps it tried, can be
confidently wrong. A cell that fails against such a reference has no verdict: it is an error that
says so (``gradci.scenarios.check``), never a fail.

Computed only for cells that would fail, once per scenario (``ReferenceAnswer.steadiness``).
"""
from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import optree

from gradci.scenarios.authoring.scenario import Scenario, Tangents
from gradci.scenarios.numerics.reference_values import Reference, flat_leaves
from gradci.scenarios.operators.records import OPERATOR_RECORDS
from gradci.scenarios.reference.finite_differences import FDSettings, ReferenceBuilder
from gradci.scenarios.reference.flat_function import FlatFunction
from gradci.scenarios.reference.jumps import Jump, nearest_jump

STEPS = (1e-2, 1e-3, 1e-4, 1e-5)
REPRODUCIBLE_ULPS = 64


@dataclasses.dataclass
class StepSpread:
    """Per tangent, the reference's spread over ``STEPS``.

    The spread is a pytree like the full result, or one number per probe. With it come the estimates at
    each step of its most wandering element, and whether two evaluations of f at x agreed.
    """

    spreads: list[Any]
    coarse: list[Any]        # the estimates at the two largest steps, and how far apart they are
    coarse_gap: list[Any]
    worst: float
    worst_index: int
    worst_estimates: list[float]
    reproducible: bool
    irreproducible_by: float = 0.0
    # Where one-sided differences, each steady, disagree: (result element, left value, right value).
    kink: tuple[int, float, float] | None = None
    # The nearest jump of f along the lines the references were differenced on, if any is within 0.1.
    jump: Jump | None = None

    def widened(self, references: list[Reference]) -> list[Reference]:
        """The references with their error estimates widened by the spread."""
        out = []
        for reference, spread in zip(references, self.spreads):
            if reference.is_full:
                error = optree.tree_map(lambda e, s: np.asarray(e) + np.asarray(s), reference.full_error, spread)
                out.append(dataclasses.replace(reference, full_error=error))
            else:
                probes = [dataclasses.replace(p, error=p.error + float(s)) for p, s in zip(reference.probes, spread)]
                out.append(dataclasses.replace(reference, probes=probes))
        return out

    def coarse_references(self, references: list[Reference]) -> list[Reference]:
        """The references as the two largest steps give them.

        Their mean, uncertain by their gap plus the original's error estimate. Noise below those steps
        does not reach them.
        """
        out = []
        for reference, value, gap in zip(references, self.coarse, self.coarse_gap):
            if reference.is_full:
                error = optree.tree_map(lambda e, g: np.asarray(e) + np.asarray(g), reference.full_error, gap)
                out.append(dataclasses.replace(reference, full=value, full_error=error))
            else:
                probes = [dataclasses.replace(p, value=float(v), error=p.error + float(g))
                          for p, v, g in zip(reference.probes, value, gap)]
                out.append(dataclasses.replace(reference, probes=probes))
        return out

    def message(self) -> str:
        if self.kink is not None:
            index, left, right = self.kink
            return (f"f may not be differentiable here (one-sided differences disagree at result element "
                    f"{index}: {left:.6g} from the left, {right:.6g} from the right): check a point away from "
                    "the kink, or give an analytic reference for the derivative you mean")
        if not self.reproducible:
            return (f"f is not reproducible: two evaluations at x differ by {self.irreproducible_by:.2g}: "
                    "finite differences cannot decide; make f deterministic or give an analytic reference")
        noise = self.worst * STEPS[-1]
        # The evidence itself, each estimate with its step: the user sees how it wanders.
        estimates = ", ".join(f"{v:.4g} at step {step:g}" for v, step in zip(self.worst_estimates, STEPS))
        return (f"f is noisy at about {noise:.1g} near x (result element {self.worst_index}: the derivative is "
                f"{estimates}, where a smooth f gives one value): finite differences cannot decide; "
                "give an analytic reference or a smoother point")


def _values(reference: Reference) -> np.ndarray:
    if reference.is_full:
        return flat_leaves(reference.full)
    return np.array([p.value for p in reference.probes], dtype=np.float64)


def step_spread(scenario: Scenario, tangent: Any, references: list[Reference]) -> StepSpread:
    """The spread of ``references`` (the scenario's, for ``tangent``) over the fixed steps."""
    tangents = list(tangent) if isinstance(tangent, Tangents) else [tangent]
    recipe = OPERATOR_RECORDS[scenario.operator].finite_differences
    flat = FlatFunction(scenario)
    first, second = flat.y0, FlatFunction(scenario).y0  # fresh: no memo between them
    differ = float(np.max(np.abs(first - second), initial=0.0)) if first.shape == second.shape else float("inf")
    spreads: list[Any] = []
    coarse: list[Any] = []
    gaps: list[Any] = []
    worst: tuple[float, int, list[Any]] = (0.0, 0, [])
    kink: tuple[int, float, float] | None = None
    for t, reference in zip(tangents, references):
        along = None if reference.is_full else [(p.u, p.w) for p in reference.probes]
        estimates = []
        for step in STEPS:
            # Line probes take their own order and steps: set them too, or every step is the default 0.05.
            settings = FDSettings(order=4, probe_order=4, line_probe_order=4, initial_steps=(step,),
                                  line_probe_steps=(step,), maxiter=1, relative_steps=True)
            estimates.append(_values(recipe(ReferenceBuilder(scenario, settings, along=along), t)))
        stacked = np.stack([*estimates, _values(reference)])
        flat_spread = np.ptp(stacked, axis=0)
        if flat_spread.size and float(np.max(flat_spread)) > worst[0]:
            index = int(np.argmax(flat_spread))
            worst = (float(flat_spread[index]), index, [float(e[index]) for e in estimates])
        spreads.append(_like(reference, flat_spread))
        if kink is None and OPERATOR_RECORDS[scenario.operator].order == 1:
            kink = _kink(scenario, recipe, t, along, _values(reference))
        coarse.append(_like(reference, (estimates[0] + estimates[1]) / 2))
        gaps.append(_like(reference, np.abs(estimates[0] - estimates[1])))
    # Rounding of a reordered sum is not irreproducibility; anything beyond it is.
    rounding = REPRODUCIBLE_ULPS * np.finfo(np.float64).eps * float(np.max(np.abs(first), initial=1.0))
    return StepSpread(spreads=spreads, coarse=coarse, coarse_gap=gaps, worst=worst[0], worst_index=worst[1],
                      worst_estimates=worst[2], reproducible=bool(differ <= rounding), irreproducible_by=differ,
                      kink=kink, jump=nearest_jump(scenario, _lines(flat.v0.size, references)))


def _lines(size: int, references: list[Reference]) -> list[tuple[str, np.ndarray]]:
    """The lines the references were differenced along: each of ``size`` input elements, or each probe's."""
    if references and not references[0].is_full:
        return [(f"probe {i}'s direction", p.u) for i, p in enumerate(p for ref in references for p in ref.probes)]
    return [(f"input element {j} (flattened)", row) for j, row in enumerate(np.eye(size))]


# One-sided second-order stencils at two small steps: steady on each side of a kink, as at a
# derivative, but apart from each other there.
ONE_SIDED_STEPS = (1e-5, 1e-6)
STEADY, APART = 1e-6, 1e-4  # relative to 1 + |the derivative|


def _kink(scenario: Scenario, recipe: Any, tangent: Any, along: Any, central: np.ndarray):
    """(result element, left, right) where f has a kink at x, else None."""
    sides = {}
    for direction in (-1, 1):
        sides[direction] = [
            _values(recipe(ReferenceBuilder(scenario, FDSettings(
                order=2, probe_order=2, line_probe_order=2, initial_steps=(step,), line_probe_steps=(step,),
                maxiter=1, relative_steps=True,
                step_directions=(direction,)), along=along), tangent)) for step in ONE_SIDED_STEPS]
    scale = 1 + np.abs(central)
    steady = np.all([np.abs(a - b) <= STEADY * scale for a, b in (sides[-1], sides[1])], axis=0)
    apart = np.abs(sides[-1][-1] - sides[1][-1]) > APART * scale
    found = np.flatnonzero(steady & apart)
    if not found.size:
        return None
    index = int(found[np.argmax(np.abs(sides[-1][-1] - sides[1][-1])[found])])
    return index, float(sides[-1][-1][index]), float(sides[1][-1][index])


def _like(reference: Reference, flat: np.ndarray) -> Any:
    """A flat spread in the shape of the reference's full result (or per probe)."""
    if not reference.is_full:
        return flat
    leaves, spec = optree.tree_flatten(reference.full, none_is_leaf=True)
    parts, start = [], 0
    for leaf in leaves:
        size = np.size(leaf)
        parts.append(flat[start:start + size].reshape(np.shape(leaf)))
        start += size
    return optree.tree_unflatten(spec, parts)
