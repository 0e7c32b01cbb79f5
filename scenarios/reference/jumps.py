"""Where f jumps close to x: the discontinuity a finite difference reaches across.

Asked with the step spread (``step_spread``), for a cell that would fail or stays undecided; the
verdict lets it excuse only a reference that cannot decide. Along each line the reference differenced
(an input element for full results, a probe's direction otherwise), f's increment
``|f(x ± s·d) - f(x)|`` is read at the steps 1e-1 … 1e-12 on each side. A smooth f's increment falls
at least tenfold a decade as the step shrinks (linearly, quadratically…); across a jump it stays at
the jump's size, then falls at once below the distance to it, and keeps falling to the smallest step
(noise would flatten there instead): a jump is found from 0.1 down to about 1e-9 of x's size, and its
distance bisected to a few percent. What it costs: 24 evaluations of f a line, 20 more to bisect a
line that has a jump.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from gradci.scenarios.authoring.scenario import Scenario
from gradci.scenarios.reference.flat_function import FlatFunction
from gradci.scenarios.reference.stencils import StencilEvaluator

SCAN_STEPS = 10.0 ** -np.arange(1, 13)
# A jump's increment keeps at least this share of itself over the decade above it...
PLATEAU = 0.5
# ...and what is left below it is at most this share (a smooth f's falls by 10 to 1000 a decade).
DROP = 0.05
# Below it f falls steadily over at least TAIL decades (noise, which a jump at the smallest steps would
# look like, does not), each by this share at least, or is lost in rounding (ROUNDING_ULPS of f's size).
TAIL = 3
FALL = 0.2
ROUNDING_ULPS = 64
BISECTIONS = 20


@dataclasses.dataclass(frozen=True)
class Jump:
    """A jump of f at ``distance`` from x along ``line`` (an input element or a probe), on ``side``."""

    line: str
    side: int
    distance: float
    size: float

    def message(self) -> str:
        sign = "+" if self.side > 0 else "-"
        return (f"f has a jump at about x {sign} {self.distance:.2g} along {self.line} (f changes by "
                f"{self.size:.3g} there): the derivative here is undefined at any step above {self.distance:.2g}, "
                "and finite differences could not step around it; check a point further from the jump, or give "
                "an analytic reference")


def nearest_jump(scenario: Scenario, lines: list[tuple[str, np.ndarray]]) -> Jump | None:
    """The closest jump of f to x along any of ``lines`` (name, flat unit direction), or None."""
    g = FlatFunction(scenario)
    evaluate = StencilEvaluator(g, scenario)
    scale = max(1.0, float(np.sqrt(np.mean(g.v0 ** 2)))) if g.v0.size else 1.0
    floor = ROUNDING_ULPS * np.finfo(np.float64).eps * max(1.0, float(np.max(np.abs(g.y0), initial=0.0)))
    found = [jump for name, direction in lines for side in (1, -1)
             if (jump := _along(evaluate, g.y0, direction * scale, side, floor, name)) is not None]
    if not found:
        return None
    nearest = min(found, key=lambda jump: jump.distance)
    return dataclasses.replace(nearest, distance=nearest.distance * scale)


def _along(evaluate: StencilEvaluator, y0: np.ndarray, direction: np.ndarray, side: int, floor: float,
           name: str) -> Jump | None:
    """The jump on one side of x along ``direction``, in units of its length, or None."""
    def increment(steps: np.ndarray) -> np.ndarray:
        with np.errstate(all="ignore"):
            values = evaluate(evaluate.g.v0 + side * steps[:, None] * direction[None, :])
        return np.max(np.abs(values - y0[None, :]), axis=1, initial=0.0)

    rises = increment(SCAN_STEPS)
    if not np.all(np.isfinite(rises)):
        return None
    for k in range(1, len(SCAN_STEPS) - TAIL):
        if _jump_between(rises, k, floor):
            outside, inside = _bisect(increment, SCAN_STEPS[k + 1], SCAN_STEPS[k], rises[k])
            return Jump(line=name, side=side, distance=float(np.sqrt(outside * inside)), size=float(rises[k]))
    return None


def _jump_between(rises: np.ndarray, k: int, floor: float) -> bool:
    """Whether f jumps between steps k+1 and k: flat above, a sudden drop, steadily falling below."""
    if rises[k] <= 1e3 * floor or rises[k] < PLATEAU * rises[k - 1]:
        return False
    if rises[k + 1] > DROP * rises[k]:
        return False
    below = rises[k + 1:]
    return bool(np.all((below[1:] <= FALL * below[:-1]) | (below[1:] <= floor)))


def _bisect(increment, inside: float, outside: float, size: float) -> tuple[float, float]:
    """Narrow (inside, outside), the steps on either side of the jump, by bisection in log step."""
    for _ in range(BISECTIONS):
        middle = float(np.sqrt(inside * outside))
        if increment(np.array([middle]))[0] > 0.5 * size:
            outside = middle
        else:
            inside = middle
    return outside, inside
