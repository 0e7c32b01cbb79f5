"""The table the conformance modules are written in: one ``Row`` of data per framework function.

A row names a public function by its qualified name ("torch.nn.functional.gelu"), where its input
points are drawn from, and which operators to check it under; ``scenarios(area, rows)`` turns every
row into one scenario per operator. The function is resolved (and its framework imported) only when
the scenario is evaluated, so the library loads where neither framework is installed.
"""
from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from gradci.scenarios.authoring.scenario import Scenario
from gradci.scenarios.library._common import derived, operator_tags, rng
from gradci.scenarios.operators.records import OPERATOR_RECORDS

FAMILY = "frameworks"

# Operator groups rows draw from. Scalar-output operators see the sum of squares of the output. One
# first-order operator checks both derivative rules: backends of the other mode build it from theirs.
SCALAR = ("derivative", "second_derivative")  # 0-d input
JVP, VJP, JACOBIAN = ("jvp",), ("vjp",), ("jacobian",)
FIRST = JVP + VJP
FULL = JACOBIAN + FIRST
LOSS = ("gradient", "value_and_gradient")
SECOND = ("hvp", "hessian")

Draw = Callable[[np.random.Generator, tuple], np.ndarray]


def uniform(low: float, high: float) -> Draw:
    return lambda g, shape: g.uniform(low, high, size=shape)


def signed(low: float, high: float) -> Draw:
    """Magnitudes in [low, high] with random signs: away from a kink or pole at zero."""
    return lambda g, shape: g.choice([-1.0, 1.0], size=shape) * g.uniform(low, high, size=shape)


def spread(low: float, high: float) -> Draw:
    """An even grid over [low, high], shuffled and jittered by less than a quarter of its step.

    No two values are closer than half a step, so max, sort, median and their kin meet no ties.
    """
    def draw(g, shape):
        count = int(np.prod(shape))
        jitter = min(0.15, (high - low) / count) / 4
        grid = np.linspace(low, high, count) + g.uniform(-1, 1, size=count) * jitter
        return g.permutation(grid).reshape(shape)

    return draw


def well_conditioned(shift: float = 3.0) -> Draw:
    """Square matrices (last two axes) with ``shift`` added to the diagonal: invertible, condition ~ 10."""
    return lambda g, shape: g.uniform(-1, 1, size=shape) + shift * np.eye(shape[-1])


def distinct_spectrum(g: np.random.Generator, shape: tuple) -> np.ndarray:
    """A random matrix of ``shape`` whose eigenvalues and singular values stay well apart.

    Near a diagonal of magnitudes 0.8, 1.7, 2.6 with alternating signs: eigenvalues (symmetrized)
    and singular values at least ~0.7 apart and away from zero, so spectral derivatives stay bounded.
    """
    k = min(shape)
    x = 0.1 * g.uniform(-1, 1, size=shape)
    x[np.arange(k), np.arange(k)] += np.linspace(0.8, 2.6, k) * (-1.0) ** np.arange(k)
    return x


def indices(x: Any, values: tuple[int, ...]) -> Any:
    """Integer data (class targets, gather indices) in x's framework and on x's device.

    Contexts are converted to the cell's float dtype, so integer data is captured, not passed."""
    import array_api_compat

    return array_api_compat.array_namespace(x).asarray(values, device=array_api_compat.device(x))


@dataclasses.dataclass(frozen=True)
class Row:
    """One framework function under some operators.

    ``call(fn, x, *contexts, **kwargs)`` applies the resolved function where ``fn(x, *contexts, **kwargs)``
    will not do (several arguments, a tuple output to pick from). ``contexts`` are ``(shape, draw)`` pairs.
    ``label`` tells apart rows of one function ("tanh" for gelu's tanh approximation)."""

    function: str
    shape: tuple[int, ...]
    draw: Draw | tuple[float, float]
    operators: tuple[str, ...]
    call: Callable | None = None
    kwargs: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    label: str = ""
    contexts: tuple = ()
    state: tuple[int, ...] = ()
    # Cells not run, for every operator: {backend pattern: reason} (a derivative the framework lacks).
    skip: Mapping[str, str] = dataclasses.field(default_factory=dict)
    # Known framework bugs, per operator: {operator: {backend pattern: "upstream: <issue URL> ..."}}.
    xfail: Mapping[str, Mapping[Any, str]] = dataclasses.field(default_factory=dict)

    @property
    def framework(self) -> str:
        return self.function.split(".")[0]

    @property
    def what(self) -> str:
        return f"{self.function}[{self.label}]" if self.label else self.function


def on_every(operators: tuple[str, ...], expected: Mapping[str, str]) -> dict:
    """The same xfail for each of a row's operators."""
    return dict.fromkeys(operators, expected)


# torch's two forward modes, torch.func.jvp and torch.autograd.forward_ad's dual numbers, run the
# same forward-mode formulas: a formula torch lacks is missing from both.
TORCH_FORWARD = ("torch-func-fwd", "torch-fwd")


def lacks(backends: str | tuple[str, ...], derivative: str) -> dict:
    """A skip for cells the framework cannot compute at all: it raises NotImplementedError there."""
    patterns = (backends,) if isinstance(backends, str) else backends
    return dict.fromkeys(patterns, f"the framework implements no {derivative} (NotImplementedError)")


def resolve(qualified: str) -> Callable:
    """The object a dotted name denotes: the longest importable module prefix, then attributes."""
    parts = qualified.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            target: Any = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attribute in parts[cut:]:
            target = getattr(target, attribute)
        return target
    raise ImportError(f"cannot import any prefix of {qualified!r}")


def _sum_of_squares(out: Any) -> Any:
    return (out * out).sum()


def _direct(fn, x, *contexts, **kwargs):
    return fn(x, *contexts, **kwargs)


def _implementation(row: Row, scalar_output: bool) -> Callable:
    # The closure holds the name, kwargs and call themselves (not the row) so that the scenario's
    # fingerprint, which hashes closures by content, changes with any of them.
    function, kwargs, call = row.function, dict(row.kwargs), row.call

    def apply(x, *contexts):
        fn = resolve(function)
        out = (call if call is not None else _direct)(fn, x, *contexts, **kwargs)
        return _sum_of_squares(out) if scalar_output else out

    return derived(apply, call) if call is not None else apply


def _draw(draw: Draw | tuple[float, float], g: np.random.Generator, shape: tuple) -> np.ndarray:
    if isinstance(draw, tuple):
        draw = uniform(*draw)
    return np.asarray(draw(g, tuple(shape)), dtype=np.float64)


def scenarios(area: str, rows: tuple[Row, ...]) -> list[Scenario]:
    out = []
    for row in rows:
        g = rng(f"{FAMILY}/{row.framework}/{row.what}")
        x = _draw(row.draw, g, row.shape)
        contexts = tuple(_draw(draw, g, shape) for shape, draw in row.contexts)
        tags = (FAMILY, row.framework, area) + (("contexts",) if contexts else ())
        for operator in row.operators:
            scalar_output = OPERATOR_RECORDS[operator].output == "scalar"
            out.append(Scenario(
                name=f"{FAMILY}/{row.framework}/{row.what}/{operator}", operator=operator,
                f={row.framework: _implementation(row, scalar_output)}, x=x, contexts=contexts,
                state=row.state, skip=dict(row.skip),
                xfail=dict(row.xfail.get(operator, {})),
                tags=tags + operator_tags(operator)))
    return out
