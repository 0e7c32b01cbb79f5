"""Float64 references, from finite differences or the scenario's own analytic reference.

The finite differences are Richardson-extrapolated (scipy.differentiate), with their error estimates.

Small inputs get the full operator result. Large ones (a network's parameters) get random
directional probes: u·R (or w·R·u for matrices) against the finite difference of f along u, so a
reference costs O(1) function evaluations in the parameter count. The function's values at the
stencil points come from ``gradci.scenarios.reference.stencils`` (batched where f allows, shared between the
scenarios of one function).
"""
from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any, cast

import numpy as np
import optree
from scipy import differentiate

from gradci.scenarios.authoring.scenario import Scenario, Tangents
from gradci.scenarios.contract.errors import ScenarioInputError
from gradci.scenarios.numerics.complex_parts import cotangent_like_outputs
from gradci.scenarios.numerics.reference_values import Probe, Reference, ReferenceUnavailable
from gradci.scenarios.numerics.shapes import shape_mismatch
from gradci.scenarios.numerics.tolerances import REFERENCE_ERROR_FACTOR, Tolerance, at_point, decides, required
from gradci.scenarios.operators.records import OPERATOR_RECORDS
from gradci.scenarios.reference.evaluation_memo import EvaluationMemo
from gradci.scenarios.reference.flat_function import FlatFunction, ravel
from gradci.scenarios.reference.stencils import StencilEvaluator

# Above these many input elements, first-order operators are checked through probes...
FULL_FIRST_ORDER_LIMIT = 16
# ...and second-order ones (a finite-difference Hessian costs O(m²) evaluations) sooner.
FULL_SECOND_ORDER_LIMIT = 4
# One random direction exposes any wrong derivative with probability 1, as gradcheck's fast mode
# relies on; what a probe dilutes (an error in a few of many elements), the elementwise agreement of
# forward and reverse modes catches. A first-order probe costs six function evaluations besides f(x)
# (FDSettings.line_probe_order), more where scipy's first two iterations disagree.
PROBES = 1
# Half precision allows each element 2-6% (rtol): along a direction whose terms cancel, even a 30%
# uniform error can hide inside the sum of those allowances. A second direction makes that unlikely.
HALF_PRECISION_PROBES = 2


def probe_count(dtypes: tuple[str, ...]) -> int:
    return HALF_PRECISION_PROBES if {"float16", "bfloat16"} & set(dtypes) else PROBES
# scipy.differentiate starts from this step and shrinks it; retried smaller where f is not finite
# (a domain edge within the step: log or sqrt at x = 1e-7 needs a step below 1e-7).
INITIAL_STEPS = (0.5, 0.05, 5e-3, 5e-4, 5e-5, 5e-6, 5e-7, 5e-8, 5e-9)


@dataclasses.dataclass
class FDSettings:
    """How finite differences are taken. The `fd` backend uses different ones to cross-check."""

    order: int = 8
    initial_steps: tuple[float, ...] = INITIAL_STEPS
    maxiter: int = 10
    # Probes on large inputs, where each evaluation is expensive. Second order (a mixed partial):
    # order 6. First order, a derivative along a line: order 4 from a step of 0.05 converges in scipy's
    # two iterations at 6 points besides f(x) on a 100k-parameter MLP (error 1e-12 to 1e-11 relative,
    # estimated 1e-11), where order 6 from 0.5 takes 8 (1e-12) and order 4 from 0.5 takes 8 to 10:
    # the points, each a new 100k-element parameter vector, are the reference's cost.
    probe_order: int = 6
    line_probe_order: int = 4
    line_probe_steps: tuple[float, ...] = INITIAL_STEPS[1:]
    # scipy.differentiate's stopping rule; None: its default (relative error sqrt(eps)).
    tolerances: dict | None = None
    # Steps relative to x's magnitude (differences taken in z = x / |x|): at x ~ 1e4 a step of 0.5 is
    # lost in rounding, at x ~ 1e-6 it leaves the domain.
    relative_steps: bool = False
    # Which stencils to take, in order of preference (0 central, 1 forward, -1 backward); None: central,
    # then one-sided where f is not finite. Forced to one side, they tell a kink from a derivative.
    step_directions: tuple[int, ...] | None = None

    def for_probes(self) -> FDSettings:
        return dataclasses.replace(self, order=self.probe_order)

    def for_line_probes(self) -> FDSettings:
        return dataclasses.replace(self, order=self.line_probe_order, initial_steps=self.line_probe_steps)


# When a reference's error estimate is too large to decide a cell, it is computed again with these,
# in turn (smaller first steps, more iterations, another order, iterating to rounding level), and
# each element keeps its most accurate value.
def _from_one_step(step: float, direction: int) -> FDSettings:
    """One-sided fourth-order stencils from ``step`` alone, for a few iterations: how a jump is stepped around.

    A discontinuity (ceil, floor, round, a step in user code) within a stencil's reach makes its
    estimates grow like the jump over the step; started below the distance to the jump, or on the
    side away from it, the stencil never reaches it and converges at once. One-sided, because a
    central stencil never evaluates f at x: jumps on both sides of x (a probe through several
    elements near their jumps) cancel in it and leave a steady, wrong slope. A few iterations keep
    the rounding small where the derivative is an exact zero (a piecewise-linear f's curvature),
    which scipy's relative stopping rule never meets and so iterates into rounding. Second-order
    stencils are central whatever the direction (scipy's hessian takes none).
    """
    return FDSettings(order=4, probe_order=4, line_probe_order=4, initial_steps=(step,), line_probe_steps=(step,),
                      maxiter=3, step_directions=(direction,))


# Steps from which ``_from_one_step`` starts, largest first, each from the right then the left: the
# first that decides ends the search.
SHRINKING_STEPS = (0.5, 0.05, 5e-3, 5e-4, 5e-5, 5e-6, 5e-7, 5e-8)

REFINEMENTS = (
    FDSettings(relative_steps=True),
    FDSettings(order=8, probe_order=8, line_probe_order=8, initial_steps=INITIAL_STEPS[1:], maxiter=16,
               tolerances={"atol": 0.0, "rtol": 1e-12}),
    # Only where both above leave the reference undecided (something looks wrong: a jump or a kink
    # within the step, an exact zero lost in rounding), at no cost to a smooth f.
    *(_from_one_step(step, direction) for step in SHRINKING_STEPS for direction in (1, -1)),
)


# Central stencils first; where f is not finite for any step (x at a domain edge), forward, then
# backward ones, which never cross the edge.
STEP_DIRECTIONS = (0, 1, -1)


def _richardson(compute: Callable[[np.ndarray, np.ndarray], Any], settings: FDSettings, size: int,
                directions=STEP_DIRECTIONS):
    """Run a scipy.differentiate routine, retrying the elements whose derivatives were not finite.

    The routine runs as ``compute(initial_steps, step_directions)``, one of each per element of its
    ``size`` input elements. Smaller initial steps, then one-sided stencils, are tried for the elements
    whose derivatives were not finite (a domain edge within the step), while the others keep their
    central stencils. A non-finite result is never a reference: a NaN there would let a NaN derivative
    pass.
    """
    directions = settings.step_directions or directions
    attempts = [(direction, step) for direction in directions for step in settings.initial_steps]
    attempt = np.zeros(size, dtype=int)
    while True:
        # Stencil points may leave f's domain (the retries exist for that): numpy's warnings about it
        # are ours, not the user's.
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            result = compute(np.array([attempts[i][1] for i in attempt]),
                             np.array([attempts[i][0] for i in attempt]))
        values = result.ddf if hasattr(result, "ddf") else result.df
        # The input element is the last axis of scipy's results.
        finite = (np.isfinite(values) & (np.asarray(result.status) != -3)).reshape(-1, size).all(axis=0)
        if finite.all():
            return result
        attempt[~finite] += 1
        if attempt.max() >= len(attempts):
            raise ReferenceUnavailable("finite differences found no finite derivative at x (a singularity "
                                       "or a domain edge); give the scenario an analytic reference")


def _scipy_options(settings: FDSettings) -> dict:
    return dict(order=settings.order, maxiter=settings.maxiter, tolerances=settings.tolerances)


# scipy.differentiate.jacobian is unannotated: type checkers infer float and int for initial_step and
# step_direction from their defaults, where it takes arrays of them (one per input element), as documented.
_scipy_jacobian = cast(Callable[..., Any], differentiate.jacobian)


def _jacobian(rows_fn: Callable[[np.ndarray], np.ndarray], point: np.ndarray, settings: FDSettings):
    """Full Jacobian (n, m) at ``point`` of a function of many points, and its error estimate.

    The function maps rows (k, m) → (k, n).
    """
    res = _richardson(lambda steps, directions: _scipy_jacobian(
        _Composed(rows_fn), point, initial_step=steps, step_direction=directions, **_scipy_options(settings)),
        settings, point.size)
    return np.atleast_2d(res.df), np.atleast_2d(res.error)


class _Composed:
    """A function of many points, called in scipy's convention.

    It wraps a function of rows (k, d) → values (k, p), or (k,) for a scalar, in scipy's calling
    convention: points (d, ...) → values (p, ...) or (...).
    """

    def __init__(self, rows_fn: Callable[[np.ndarray], np.ndarray]):
        self._rows_fn = rows_fn

    def __call__(self, points: np.ndarray) -> np.ndarray:
        d, batch = points.shape[0], points.shape[1:]
        values = np.asarray(self._rows_fn(points.reshape(d, -1).T), dtype=np.float64)
        return values.T.reshape(values.shape[1:] + batch)


def _along_a_line(compute: Callable[[np.ndarray, np.ndarray], Any], settings: FDSettings,
                  prefetch: Callable[[np.ndarray], None] | None):
    """``_richardson`` of a scipy.differentiate call at s = 0 of a function of one number s.

    ``prefetch(s)``, where given, is told the steps of a central stencil's first two iterations before
    they are asked for, to evaluate them in one call: scipy asks for its first iteration's ``order``
    points, then for two more each iteration, and never stops before the second (its error estimate
    compares two).
    """
    def prefetched(steps, directions):
        if prefetch is not None and directions[0] == 0 and settings.maxiter > 1:
            prefetch(_central_steps(float(steps[0]), settings.order))
        return compute(steps, directions)

    return _richardson(prefetched, settings, 1)


def _directional(rows_fn: Callable[[np.ndarray], np.ndarray], settings: FDSettings,
                 prefetch: Callable[[np.ndarray], None] | None = None):
    """d/ds at 0 of a vector-valued function of a scalar s, as (value (n,), error (n,)).

    The function is given on a column of s values: (k, 1) → (k, n).
    """
    res = _along_a_line(lambda steps, directions: _scipy_jacobian(
        _Composed(rows_fn), np.zeros(1), initial_step=steps, step_direction=directions, step_factor=STEP_FACTOR,
        **_scipy_options(settings)), settings, prefetch)
    return np.atleast_2d(res.df)[:, 0], np.atleast_2d(res.error)[:, 0]


def _line_derivative(along: Callable[[np.ndarray], np.ndarray], settings: FDSettings,
                     prefetch: Callable[[np.ndarray], None] | None = None) -> tuple[float, float]:
    """d/ds at 0 of a scalar function of s, given elementwise on arrays of s, as (value, error).

    They are what ``_directional`` computes for a vector, here through scipy.differentiate.derivative
    itself (its jacobian wraps the same iterations in reshapes that cost as much again as a probe's
    arithmetic).
    """
    res = _along_a_line(lambda steps, directions: differentiate.derivative(
        along, 0.0, initial_step=float(steps[0]), step_direction=int(directions[0]), step_factor=STEP_FACTOR,
        **_scipy_options(settings)), settings, prefetch)
    return float(res.df), float(res.error)


# scipy.differentiate's step reduction factor (its default), passed explicitly since ``_central_steps``
# predicts the steps it takes.
STEP_FACTOR = 2.0


def _central_steps(initial_step: float, order: int) -> np.ndarray:
    """The steps at which scipy.differentiate's central stencil evaluates in its first two iterations.

    The stencil is of ``order``, from ``initial_step`` at 0. The steps are computed the same way as its
    ``pre_func_eval``: with a factor of 2 every step is exact.
    """
    terms = (order + 1) // 2
    h = np.float64(initial_step)
    first = h / STEP_FACTOR ** np.arange(terms, dtype=np.float64)
    second = (h / STEP_FACTOR) / STEP_FACTOR ** (terms - 1)
    return np.concatenate([-first[::-1], first, [-second, second]])


def _hessian(rows_fn: Callable[[np.ndarray], np.ndarray], point: np.ndarray, settings: FDSettings):
    """Hessian (m, m) at ``point`` of a scalar function of many points, and its error estimate.

    The function maps rows (k, m) → (k,). Central stencils only, one step for all: scipy's hessian
    takes no step direction.
    """
    res = _richardson(lambda steps, directions: differentiate.hessian(
        _Composed(rows_fn), point, initial_step=float(steps[0]), **_scipy_options(settings)),
        settings, 1, directions=(0,))
    return res.ddf, res.error


def _nothing(*shape: int) -> tuple[np.ndarray, np.ndarray]:
    """An exact zero-sized (or zero) derivative and its error: an empty x or f(x) has nothing to difference.

    scipy.differentiate is not asked about zero elements (it cannot reshape them).
    """
    return np.zeros(shape), np.zeros(shape)


def _unit_directions(rng: np.random.Generator, size: int, count: int) -> list[np.ndarray]:
    """``count`` random unit vectors, every element of them at least half the largest in size.

    Any continuous distribution finds a wrong derivative with probability 1 (no nonzero error is
    orthogonal to them but on a set of measure zero); uniform draws cost a third of Gaussian ones,
    which took a tenth of a 100k-parameter MLP's check. Uniform in ±[0.5, 1), not in [-0.5, 0.5): a
    wrong element of a large result is then never probed by a near-zero weight (1-2 % of seeds hid a 1 %
    error in one element of a float64 gradient), so what one probe sees of it is at least half its share.
    """
    directions = rng.random((count, size))
    directions -= 0.5
    directions += np.copysign(0.5, directions)
    directions /= np.sqrt(np.einsum("ij,ij->i", directions, directions))[:, None]
    return list(directions)


class ReferenceBuilder:
    """Computes the reference of one scenario, for one (co)tangent.

    It is the finite-difference vocabulary the operator records' ``finite_differences`` functions are
    written in.
    """

    def __init__(self, scenario: Scenario, settings: FDSettings,
                 along: list[tuple[np.ndarray, np.ndarray | None]] | None = None,
                 memo: EvaluationMemo | None = None):
        """Set up the reference of ``scenario``, with given probe directions or f's shared evaluations.

        ``along``: probe these directions (u, and w for matrix results or None) instead of random
        ones, whatever the input's size: how a disagreement between two modes is decided. ``memo``:
        f's evaluations shared with the other scenarios of the same function.
        """
        self.scenario = scenario
        self.settings = settings
        self.along = along
        self.g = memo.flat_function(scenario) if memo is not None else FlatFunction(scenario)
        # f at many flat points at once (rows → rows): what every difference below is taken of.
        self.evaluate = StencilEvaluator(self.g, scenario, memo)
        seed = int(scenario.fingerprint()[:8], 16)
        self.rng = np.random.default_rng(seed)
        # Differences are taken in z = x / scale (per element for full results, one number for
        # probes) and scaled back: a derivative in x is the one in z divided by the scale.
        # Absolute steps: a scale of 1.0, the same numbers as an array of ones without writing one
        # the size of x (for a network's parameters, more memory traffic than a probe's arithmetic).
        self.scale: np.ndarray | float = 1.0
        self.probe_scale = 1.0
        if settings.relative_steps:
            magnitude = np.abs(self.g.v0)
            if np.any(magnitude > 0):
                self.scale = np.where(magnitude > 0, magnitude, 1.0)
                self.probe_scale = float(np.sqrt(np.mean(magnitude ** 2)))

    # -- what the operator records read (gradci.scenarios.operators.vocabulary.FiniteDifferences) -----
    @property
    def input_size(self) -> int:
        return self.g.v0.size

    @property
    def output_size(self) -> int:
        return self.g.y0.size

    @property
    def x(self) -> Any:
        return self.scenario.x

    @property
    def value(self) -> Any:
        return self.g.value

    def probes_needed(self, order: int) -> bool:
        """Whether an operator of this order is too costly here for a full finite-difference result."""
        if self.along is not None:
            return True
        return self.input_size > (FULL_FIRST_ORDER_LIMIT if order == 1 else FULL_SECOND_ORDER_LIMIT)

    def _directions(self) -> list[tuple[np.ndarray, np.ndarray | None]]:
        if self.along is not None:
            return self.along
        return [(u, None) for u in _unit_directions(self.rng, self.input_size, probe_count(self.scenario.dtypes))]

    def full_or_probes(self, order: int, weights: Callable[[], np.ndarray], matrix: bool,
                       full: Callable[[np.ndarray, np.ndarray], tuple[Any, Any]]) -> Reference:
        """A result from the order's full matrix, or probes of it past the order's size limit.

        The full matrix is J, or the Hessian of a scalar f; ``full(matrix, error) -> (result, error)``
        makes the result and its error from it. Past the size limit, the probes are made with
        ``weights`` and ``matrix`` as the probe methods take them.
        """
        if self.probes_needed(order):
            probe = self.first_order_probes if order == 1 else self.second_order_probes
            return Reference(self.g.value, probes=probe(weights, matrix))
        result, error = full(*(self.jacobian_matrix() if order == 1 else self.hessian_matrix()))
        return self.full(result, error)

    def full(self, result: Any, error: Any) -> Reference:
        return Reference(self.g.value, result, error)

    # -- full results -------------------------------------------------------------------------
    def jacobian_matrix(self):
        if self.input_size == 0 or self.output_size == 0:  # an empty batch: nothing to difference
            return _nothing(self.output_size, self.input_size)
        jac, err = _jacobian(lambda z: self.evaluate(z * self.scale), self.g.v0 / self.scale, self.settings)
        return jac / self.scale, err / self.scale

    def hessian_matrix(self, output: int = 0):
        """The Hessian of one element of f's (flat) output."""
        if self.input_size == 0:
            return _nothing(0, 0)
        hess, err = _hessian(lambda z: self.evaluate(z * self.scale)[:, output], self.g.v0 / self.scale,
                             self.settings)
        outer = np.outer(self.scale, self.scale)
        return hess / outer, err / outer

    def directional(self, flat_t: np.ndarray):
        """d/ds f(x + s·t) at 0, flat, and its error estimate."""
        if self.input_size == 0 or self.output_size == 0:  # along an empty tangent f does not move
            return _nothing(self.output_size)
        c = self.probe_scale
        line = self.evaluate.line(flat_t, c)
        d, err = _directional(line, self.settings, prefetch=line.prefetch)
        return d / c, err / c

    def like_x(self, flat: np.ndarray) -> Any:
        return self.g.unravel_input(flat)

    def like_y(self, flat: np.ndarray) -> Any:
        return self.g.unravel_output(flat)

    @staticmethod
    def flat(tree: Any) -> np.ndarray:
        return ravel(tree)[0]

    def unit_direction(self, size: int) -> np.ndarray:
        return _unit_directions(self.rng, size, 1)[0]

    # -- probes ---------------------------------------------------------------------------------
    def first_order_probes(self, weights: Callable[[], np.ndarray], matrix: bool) -> list[Probe]:
        """w·J·u for random unit u, by directional differences.

        w is random for a Jacobian (kept in the probe), the cotangent for a vjp, 1 for a gradient
        (results like x: compared as u·R).
        """
        probes = []
        for u, given_w in self._directions():
            w = given_w if given_w is not None else weights()
            c = self.probe_scale
            line = self.evaluate.line(u, c)
            def along(s, line=line, w=w):  # bound now: the loop moves on
                return (line(s) @ w).reshape(np.shape(s))

            value, error = _line_derivative(along, self.settings.for_line_probes(), prefetch=line.prefetch)
            probes.append(Probe(u=u, w=w if matrix else None, value=value / c, error=error / c))
        return probes

    def second_order_probes(self, weights: Callable[[], np.ndarray], matrix: bool) -> list[Probe]:
        """w·H·u as the mixed partial ∂²/∂a∂b f(v0 + a·w + b·u); w is the tangent for an hvp."""
        probes = []
        for u, given_w in self._directions():
            w = given_w if given_w is not None else weights()
            c = self.probe_scale
            def mixed(ab, u=u, w=w, c=c):  # bound now: the loop moves on
                return self.evaluate(self.g.v0 + c * (ab[:, :1] * w + ab[:, 1:] * u))[:, 0]

            hess, err = _hessian(mixed, np.zeros(2), self.settings.for_probes())
            probes.append(Probe(u=u, w=w if matrix else None, value=float(hess[0, 1] / c ** 2),
                                error=float(err[0, 1] / c ** 2)))
        return probes


def _analytic(scenario: Scenario, value: Any, tangent: Any) -> list[Reference]:
    """The scenario's own reference.

    Its result, a list of them (one per batched tangent), or a function of the point (and the tangent,
    for operators that take one) giving it, which also serves every tangent a variant draws.
    """
    def one(expected: Any) -> Reference:
        expected = optree.tree_map(lambda leaf: np.asarray(leaf, dtype=np.float64), expected)
        if OPERATOR_RECORDS[scenario.operator].returns_value:
            value_part, expected = expected
        zeros = optree.tree_map(np.zeros_like, expected)
        return Reference(value, expected, zeros, method="analytic")

    tangents = list(tangent) if isinstance(tangent, Tangents) else [tangent]
    if callable(scenario.reference):
        with_tangent = OPERATOR_RECORDS[scenario.operator].takes_tangent_or_cotangent
        return [one(scenario.reference(scenario.x, *((t,) if with_tangent else ()), *scenario.contexts))
                for t in tangents]
    if isinstance(scenario.tangent, Tangents):
        return [one(r) for r in scenario.reference]
    return [one(scenario.reference)]


def default_tangent(scenario: Scenario, value: Any, complex_outputs: list[bool] | None = None) -> Any:
    """A fixed-seed tangent (like x) or cotangent (like f(x)) when the scenario gives none.

    A cotangent the scenario gives is checked against f(x) (``value``, its complex leaves as pairs, which
    ``complex_outputs`` marks) here, where f(x) is first known: a real leaf for a complex output is read as
    t + 0i, and one of another shape is refused with the shape it must have.
    """
    record = OPERATOR_RECORDS[scenario.operator]
    if scenario.tangent is not None:
        return given_cotangent(scenario, value, complex_outputs or []) if record.takes_cotangent else scenario.tangent
    if record.takes_tangent:
        like = scenario.x
    elif record.takes_cotangent:
        like = value
    else:
        return None
    rng = np.random.default_rng(int(scenario.fingerprint()[8:16], 16))
    return optree.tree_map(lambda leaf: rng.standard_normal(np.shape(leaf)), like)


def given_cotangent(scenario: Scenario, value: Any, complex_outputs: list[bool]) -> Any:
    """The scenario's cotangent (or batch of them) read against f(x), or ScenarioInputError naming f(x)'s shape."""
    batched = isinstance(scenario.tangent, Tangents)
    given = list(scenario.tangent) if batched else [scenario.tangent]
    known = scenario.cotangent_given_complex()
    masks: list[tuple[bool, ...] | None] = list(known) if known is not None else [None] * len(given)
    read = []
    for index, (cotangent, given_complex) in enumerate(zip(given, masks)):
        if any(complex_outputs):
            cotangent = cotangent_like_outputs(cotangent, value, complex_outputs, given_complex or ())
        mismatch = shape_mismatch(cotangent, value, tuple(complex_outputs) or None, given_complex)
        if mismatch is not None:
            which = f"cotangent {index} of the batch" if batched else "the cotangent"
            raise ScenarioInputError(f"scenario {scenario.name!r}: {scenario.operator} needs {which} shaped like "
                                     f"f(x) (each leaf as f(x)'s, in its structure; a real one for a complex "
                                     f"output reads as t + 0i): {mismatch}")
        read.append(cotangent)
    return Tangents(read) if batched else read[0]


def compute_references(scenario: Scenario, settings: FDSettings | None = None,
                       memo: EvaluationMemo | None = None) -> tuple[Any, list[Reference]]:
    """The tangent used, and one Reference per tangent.

    Each is refined where its error estimate cannot decide the scenario's strictest tolerance. f's
    evaluations are shared through ``memo`` if given.
    """
    builder = ReferenceBuilder(scenario, settings or FDSettings(), memo=memo)
    tangent = default_tangent(scenario, builder.g.value, builder.g.complex_outputs)
    if scenario.reference is not None:
        return tangent, _analytic(scenario, builder.g.value, tangent)
    tangents = list(tangent) if isinstance(tangent, Tangents) else [tangent]
    recipe = OPERATOR_RECORDS[scenario.operator].finite_differences
    strictest = strictest_tolerance(scenario, builder.g.value)
    references = []
    for t in tangents:
        reference = _with_failure(builder, functools.partial(recipe, builder, t))
        for refined_settings in REFINEMENTS:
            if decides(reference, strictest):
                break
            refined = ReferenceBuilder(scenario, refined_settings, memo=memo)
            reference = most_accurate(reference, _with_failure(refined, functools.partial(recipe, refined, t)))
        references.append(reference)
    return tangent, references


def strictest_tolerance(scenario: Scenario, value: Any) -> Tolerance:
    """The tolerance a reference of ``scenario`` (f(x) = ``value``) must decide: its dtypes' strictest, at x."""
    return at_point(required(scenario.dtypes, scenario.rtol, scenario.atol), value, scenario.x,
                    OPERATOR_RECORDS[scenario.operator].order)


# Where the fixed steps of ``step_spread`` agree with each other and not with the reference, a second
# reference starts at the largest of them that agreed with the smaller ones: a few fourth-order iterations
# (steps s, s/2, s/4 of x's size), along the first reference's own probe directions.
def _small_step_settings(step: float, maxiter: int = 3) -> FDSettings:
    return FDSettings(order=4, probe_order=4, line_probe_order=4, initial_steps=(step,), line_probe_steps=(step,),
                      maxiter=maxiter, relative_steps=True)


# Where that second reference cannot decide, its steps are lost in f's rounding, which a k-th difference
# magnifies to about eps·|f|/stepᵏ: from s = 1e-4 (the step of 1e-3 reached a kink) down to s/4, a second
# difference rounds 100 times as much as at the 2.5e-4 the tolerance's floor is set for
# (``numerics.tolerances.SECOND_DIFFERENCE_STEP``), and a piecewise-linear f's exact-zero curvature (|f| ≈ 36)
# came out as 1e-5 ± 1e-4: "reference unreliable". It is taken again from these multiples of s, smallest first
# and all below the fixed step that disagreed (10·s), until it decides. Two iterations each, the fewest that
# give an error estimate: where rounding dominates, each halving of the step only adds to it.
LARGER_STEPS = (2.0, 4.0, 8.0)
LARGER_STEP_ITERATIONS = 2


def small_step_references(scenario: Scenario, tangent: Any, references: list[Reference],
                          step: float) -> list[Reference]:
    """The references again, from ``step`` down: what the verdict asks where the first was the outlier.

    Where they cannot decide the scenario's strictest tolerance, they are taken again from a few larger
    steps (``LARGER_STEPS``), each element keeping its most accurate value that agrees with the one it replaces.
    """
    tangents = list(tangent) if isinstance(tangent, Tangents) else [tangent]
    recipe = OPERATOR_RECORDS[scenario.operator].finite_differences
    out = []
    for t, reference in zip(tangents, references):
        along = None if reference.is_full else [(p.u, p.w) for p in reference.probes]
        builder = ReferenceBuilder(scenario, _small_step_settings(step), along=along)
        again = _with_failure(builder, functools.partial(recipe, builder, t))
        strictest = strictest_tolerance(scenario, builder.g.value)
        for factor in LARGER_STEPS:
            if decides(again, strictest):
                break
            larger = ReferenceBuilder(scenario, _small_step_settings(factor * step, LARGER_STEP_ITERATIONS),
                                      along=along)
            again = most_accurate(again, _with_failure(larger, functools.partial(recipe, larger, t)), agreeing=True)
        out.append(again)
    return out


def _with_failure(builder: ReferenceBuilder, compute: Callable[[], Reference]) -> Reference:
    """``compute()``, its ReferenceUnavailable saying what f raised at the stencil points, if it did."""
    try:
        return compute()
    except ReferenceUnavailable as exc:
        if builder.g.failure is None:
            raise
        failure = builder.g.failure
        raise ReferenceUnavailable(f"{exc} (f raised at stencil points: {type(failure).__name__}: "
                                   f"{str(failure).strip()[:200]})") from None


def most_accurate(a: Reference, b: Reference, *, agreeing: bool = False) -> Reference:
    """Element by element (probe by probe), the value with the smaller error estimate.

    ``agreeing``: ``b``'s only where it also agrees with ``a``'s, apart by no more than
    ``REFERENCE_ERROR_FACTOR`` times their two error estimates (the margin the verdict gives a
    reference). A larger step's stencil that reached the kink ``a``'s steps stay clear of is told by
    its own error estimate, which the kink inflates; this guards the rare one it leaves small.
    """
    def take_b(error_a: Any, error_b: Any, value_a: Any, value_b: Any) -> Any:
        error_a, error_b = np.asarray(error_a), np.asarray(error_b)
        smaller = error_b < error_a
        if not agreeing:
            return smaller
        apart = np.abs(np.asarray(value_a) - np.asarray(value_b))
        return smaller & (apart <= REFERENCE_ERROR_FACTOR * (error_a + error_b))

    if a.is_full:
        chosen = optree.tree_map(take_b, a.full_error, b.full_error, a.full, b.full)

        def pick(take: Any, from_a: Any, from_b: Any) -> Any:
            return np.where(take, from_b, from_a)

        return dataclasses.replace(a, full=optree.tree_map(pick, chosen, a.full, b.full),
                                   full_error=optree.tree_map(pick, chosen, a.full_error, b.full_error))
    probes = [pb if take_b(pa.error, pb.error, pa.value, pb.value) else pa for pa, pb in zip(a.probes, b.probes)]
    return dataclasses.replace(a, probes=probes)
