"""Whether finite differences can decide at all: the reference's value at several fixed steps.

A smooth f gives the same derivative at every step from 1e-2 to 1e-5 up to what a fourth-order
stencil's truncation (shrinking like step⁴, largest at 1e-2) and f's rounding (growing like
eps·|f|/stepᵏ for a k-th derivative, largest at 1e-5: a second difference at 1e-5 resolves only about
1e-6·|f|) explain. Estimates that wander beyond both mean f is noisy at that scale — an iterative
solver's tolerance, a random sample, a jagged approximation — and Richardson's own error estimate,
taken from the last steps it tried, can be confidently wrong. A cell that fails against such a
reference has no verdict: it is an error that says so (``gradci.scenarios.check``), never a fail.
Where the fixed steps agree with each other and the reference alone disagrees (it started at a
larger step, across a kink or a max-switch of a piecewise-linear f), the reference is the outlier:
``outlier`` says so, and the verdict takes a second reference from the small steps. So it does where the
reference agrees with them but its error estimate cannot decide.

Computed only for cells that would fail, once per scenario (``ReferenceAnswer.steadiness``).
"""
from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import optree

from gradci.scenarios.authoring.scenario import Scenario, Tangents
from gradci.scenarios.numerics.reference_values import Reference, flat_leaves
from gradci.scenarios.numerics.tolerances import REFERENCE_ERROR_FACTOR, decides
from gradci.scenarios.operators.records import OPERATOR_RECORDS
from gradci.scenarios.reference.finite_differences import FDSettings, ReferenceBuilder, strictest_tolerance
from gradci.scenarios.reference.flat_function import FlatFunction
from gradci.scenarios.reference.jumps import Jump, nearest_jump

STEPS = (1e-2, 1e-3, 1e-4, 1e-5)
REPRODUCIBLE_ULPS = 64
# A fixed-step estimate's rounding: f's own (in ulps of |f|) through the stencil's weights (1.5 for a
# fourth-order first difference, 1.5² for the nested second one), over stepᵏ.
ROUNDING_ULPS = 64
STENCIL_WEIGHT = 1.5
# The truncation at each step, from the gap between the two largest: all of it at 1e-2, shrinking like
# step⁴ below (a fourth-order stencil), with this much room for a higher derivative's share.
TRUNCATION_ORDER = 4
TRUNCATION_SAFETY = 10.0


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
    # What truncation and rounding explain at each step, for the worst element (the evidence's margin).
    worst_explained: list[float] = dataclasses.field(default_factory=list)
    # Where the fixed steps from this one down agree with each other and the reference alone does not
    # (the module's doc), or agrees but cannot decide: the step a second reference starts from; None where
    # they do not.
    outlier_step: float | None = None
    small_steps: list[tuple[np.ndarray, np.ndarray]] = dataclasses.field(default_factory=list, repr=False)

    def agrees_below(self, references: list[Reference]) -> bool:
        """Whether ``references`` (from ``outlier_step`` down) agree with the fixed steps from there down."""
        for reference, (rows, explained) in zip(references, self.small_steps):
            stacked = np.concatenate([rows, _values(reference)[None]])
            margins = np.concatenate([explained, REFERENCE_ERROR_FACTOR * _errors(reference)[None]])
            if np.any(_unexplained(stacked, margins) > 0):
                return False
        return True

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
        # The evidence itself, each estimate with its step and what truncation and rounding allow it:
        # the user sees how it wanders, beyond what a smooth f would.
        estimates = ", ".join(f"{v:.4g} at step {step:g} (±{allowed:.1g})"
                              for v, step, allowed in zip(self.worst_estimates, STEPS, self.worst_explained))
        return (f"f is noisy (or kinked within the steps) at about {noise:.1g} near x (result element "
                f"{self.worst_index}: the derivative is "
                f"{estimates}; they disagree by {self.worst:.2g} beyond what truncation and rounding of a smooth f "
                "explain (the ±)): finite differences cannot decide; give an analytic reference or a smoother point")


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
    worst: tuple[float, int, list[Any], list[Any]] = (0.0, 0, [], [])
    kink: tuple[int, float, float] | None = None
    outlier = 0  # 1 + the index of the largest step a second reference can start from; 0: none
    missed = False  # a tangent whose spread no second reference explains
    small_steps: list[tuple[np.ndarray, np.ndarray]] = []  # per tangent: the agreeing steps below the start
    order = OPERATOR_RECORDS[scenario.operator].order
    rounding = _rounding(flat, order)
    strictest = strictest_tolerance(scenario, flat.value)
    for t, reference in zip(tangents, references):
        along = None if reference.is_full else [(p.u, p.w) for p in reference.probes]
        estimates = []
        for step in STEPS:
            # Line probes take their own order and steps: set them too, or every step is the default 0.05.
            settings = FDSettings(order=4, probe_order=4, line_probe_order=4, initial_steps=(step,),
                                  line_probe_steps=(step,), maxiter=1, relative_steps=True)
            estimates.append(_values(recipe(ReferenceBuilder(scenario, settings, along=along), t)))
        fixed = np.stack(estimates)
        explained = _explained(fixed, rounding)
        reference_rows = (_values(reference)[None], REFERENCE_ERROR_FACTOR * _errors(reference)[None])
        flat_spread = _unexplained(np.concatenate([fixed, reference_rows[0]]),
                                   np.concatenate([explained, reference_rows[1]]))
        tail = _agreeing_tail(fixed, rounding)
        if tail is not None and np.any(flat_spread > 0):
            rows, explained_rows = fixed[tail:], _explained(fixed[tail:], rounding[tail:])
            apart = _unexplained(np.concatenate([rows, reference_rows[0]]),
                                 np.concatenate([explained_rows, reference_rows[1]]))
            # Agreeing with them but too uncertain to decide (its first steps reached the kink the small
            # ones stay clear of, or its last ones were lost in f's rounding), it is retaken from them too.
            if np.any(apart > 0) or not decides(reference, strictest):
                outlier = max(outlier, tail + 1)
                small_steps.append((rows[1:], explained_rows[1:]))
            else:
                tail = None
        else:
            small_steps.append((fixed[-2:], explained[-2:]))
        missed = missed or (tail is None and bool(np.any(flat_spread > 0)))
        if flat_spread.size and (not worst[2] or float(np.max(flat_spread)) > worst[0]):
            index = int(np.argmax(flat_spread))
            worst = (float(flat_spread[index]), index, [float(e[index]) for e in estimates],
                     [float(e[index]) for e in explained])
        spreads.append(_like(reference, flat_spread))
        if kink is None and OPERATOR_RECORDS[scenario.operator].order == 1:
            kink = _kink(scenario, recipe, t, along, _values(reference))
        coarse.append(_like(reference, (estimates[0] + estimates[1]) / 2))
        gaps.append(_like(reference, np.abs(estimates[0] - estimates[1])))
    # Rounding of a reordered sum is not irreproducibility; anything beyond it is.
    reordered = REPRODUCIBLE_ULPS * np.finfo(np.float64).eps * float(np.max(np.abs(first), initial=1.0))
    return StepSpread(spreads=spreads, coarse=coarse, coarse_gap=gaps, worst=worst[0], worst_index=worst[1],
                      worst_estimates=worst[2], reproducible=bool(differ <= reordered), irreproducible_by=differ,
                      kink=kink, jump=nearest_jump(scenario, _lines(flat.v0.size, references)),
                      worst_explained=worst[3],
                      outlier_step=STEPS[outlier] if outlier and not missed else None, small_steps=small_steps)


def _rounding(flat: FlatFunction, order: int) -> np.ndarray:
    """Per step of ``STEPS``, what f's rounding makes of a fixed-step estimate of an ``order``-th derivative.

    Steps are relative to x's root-mean-square size, as the probes' are (``FDSettings.relative_steps``).
    """
    size = float(np.max(np.abs(flat.y0), initial=0.0)) if flat.y0.size else 0.0
    length = float(np.sqrt(np.mean(flat.v0 ** 2))) if flat.v0.size else 0.0
    length = length if length > 0 else 1.0
    unit = ROUNDING_ULPS * STENCIL_WEIGHT ** order * np.finfo(np.float64).eps * size
    return np.array([unit / (step * length) ** order for step in STEPS])


def _agreeing_tail(fixed: np.ndarray, rounding: np.ndarray) -> int | None:
    """The index of the largest step from which the fixed steps down agree, for every element, or None.

    Three steps whose truncation shrinks as a smooth f's does, or the last two within their rounding (f
    piecewise linear at that scale: a kink or a max-switch within the larger steps). The largest of
    them agrees only by the truncation it is allowed (a kink crossed looks like truncation there): a
    second reference starts from the next.
    """
    for start in range(len(STEPS) - 2):
        rows = fixed[start:]
        if not np.any(_unexplained(rows, _explained(rows, rounding[start:])) > 0):
            return start
    last = len(STEPS) - 2
    within = np.abs(fixed[last] - fixed[last + 1]) <= rounding[last] + rounding[last + 1]
    return last - 1 if bool(np.all(within)) else None


def _explained(estimates: np.ndarray, rounding: np.ndarray) -> np.ndarray:
    """(steps, elements): how far each fixed-step estimate may be from the derivative, for a smooth f.

    Truncation, from the gap between the two largest steps given (all of it the largest's, shrinking like
    step⁴ below), plus rounding. ``rounding``: per step, for the steps the rows are at (the last of
    ``STEPS``).
    """
    steps = STEPS[len(STEPS) - len(estimates):]
    gap = np.abs(estimates[0] - estimates[1])
    shrink = np.array([(step / steps[0]) ** TRUNCATION_ORDER for step in steps])
    shrink[1:] *= TRUNCATION_SAFETY
    return shrink[:, None] * gap[None, :] + rounding[:, None]


def _unexplained(values: np.ndarray, explained: np.ndarray) -> np.ndarray:
    """Per element, the largest disagreement of two rows of ``values`` beyond both rows' ``explained``."""
    apart = np.abs(values[:, None, :] - values[None, :, :]) - explained[:, None, :] - explained[None, :, :]
    with np.errstate(invalid="ignore"):
        return np.nan_to_num(np.max(np.maximum(apart, 0.0), axis=(0, 1)), nan=np.inf)


def _errors(reference: Reference) -> np.ndarray:
    if reference.is_full:
        return flat_leaves(reference.full_error)
    return np.array([p.error for p in reference.probes], dtype=np.float64)


def _lines(size: int, references: list[Reference]) -> list[tuple[str, np.ndarray]]:
    """The lines the references were differenced along: each of ``size`` input elements, or each probe's."""
    if references and not references[0].is_full:
        return [(f"probe {i}'s direction", p.u) for i, p in enumerate(p for ref in references for p in ref.probes)]
    return [(f"input element {j} (flattened)", row) for j, row in enumerate(np.eye(size))]


# One-sided second-order stencils at two small steps: steady on each side of a kink, as at a
# derivative, but apart from each other there.
ONE_SIDED_STEPS = (1e-5, 1e-6)
STEADY, APART = 1e-6, 1e-4  # relative to 1 + |the derivative|
CURVATURE_FACTOR = 10.0


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
    gap = np.abs(sides[-1][-1] - sides[1][-1])
    # Curvature parts one-sided differences too, by about the step times the second derivative, which is
    # what each side moves by between its two steps: a kink's gap stays where that is far smaller.
    curvature = sum(np.abs(a - b) for a, b in (sides[-1], sides[1]))
    apart = (gap > APART * scale) & (gap > CURVATURE_FACTOR * curvature)
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
