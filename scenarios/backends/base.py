"""What a backend is: a framework, a mode, and a way to compute each operator there."""
from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from gradci.scenarios.contract.cell import FRAMEWORKS, MODES


class CellSkipped(Exception):
    """The cell does not apply (no implementation for the framework, input too large, ...)."""


@dataclasses.dataclass(frozen=True)
class ReturnedPrimal:
    """f(x) as the transform that computed a cell's derivative returned it, to be checked against f(x).

    ``values``: one per (co)tangent where they are batched, else one; float64 numpy. ``source`` names
    the transform ("jax.vjp returned"), ``culprit`` the likely cause where it differs.
    """

    values: Any
    source: str
    culprit: str


@dataclasses.dataclass(frozen=True)
class ComputedPattern:
    """The sparsity pattern a sparse backend computed a Jacobian or Hessian from, to be held against the reference.

    ``matrix``: boolean, one row per element of f(x) (of x for a Hessian), one column per element of
    x. ``source`` names where it came from ("asdex's detected pattern"); ``dense`` is asked only for a
    cell that fails against probes.
    """

    matrix: Any
    source: str
    # The framework's dense derivative as the same matrix, computed on demand: where the reference is
    # made of probes it cannot name an entry the pattern leaves out, and this can.
    dense: Callable[[], Any] | None = None


@dataclasses.dataclass
class Prepared:
    """One cell made ready to run: ``call()`` computes the operator and waits for the device.

    ``inputs`` are the framework-side arguments (x, tangent, contexts) so the checker can verify that
    the backend left them intact; ``to_numpy`` turns a result into float64 numpy.
    """

    call: Callable[[], Any]
    to_numpy: Callable[[Any], Any]
    inputs: Any
    # A backend that is itself an approximation (finite differences) reports its own error estimate
    # per (co)tangent after a call; the comparison widens by it as by the reference's.
    error_estimate: Callable[[], list] | None = None
    # The dtypes f's value comes out in, from one evaluation: a float32 cell whose f answers in float64
    # (a float64 constant in its closure) checks float64 arithmetic, and says so.
    # (dtypes f returns, floating dtypes computed inside f), for the cell's wider-dtype warning
    value_dtypes: Callable[[], tuple[set[str], set[str]]] | None = None
    # The dtypes of a result's arrays as the backend returned them (before ``to_numpy`` makes them
    # float64): a derivative in another dtype than its input's fails the cell. None: not read (fd, whose
    # results are float64 numpy by construction).
    result_dtypes: Callable[[Any], set[str]] | None = None
    # Whether the first ``call()`` compiles and later calls only run the compiled program (jax.jit):
    # one more call then measures the steady state at the cost of a run alone.
    compiled: bool = False
    # f(x) as the last ``call()``'s transform returned it beside the derivative (jax.vjp, jax.jvp, a
    # Jacobian's aux), or None where the operator's transform returns none.
    returned_primal: Callable[[], ReturnedPrimal | None] = lambda: None
    # The same prepared program at another point: ``at(x, tangent)`` (numpy, as the scenario's) gives a
    # call like ``call`` with those inputs in place of the cell's, converted the same way. None where
    # the backend cannot run its preparation elsewhere.
    at: Callable[[Any, Any], Callable[[], Any]] | None = None
    # The pattern a sparse backend (coloring) computed from, or None: an entry it leaves out comes
    # out 0 whatever the derivative is there, so it is named before the values are compared.
    computed_pattern: Callable[[], ComputedPattern | None] = lambda: None
    # For complex x: the complex dtype it ran in and the convention its result was read in
    # (``gradci.scenarios.numerics.complex_conventions``), for the cell's record; "" for a real x.
    convention: str = ""


class Backend:
    """A framework + mode + options. Subclasses set the class attributes and implement ``prepare``."""

    name: str = ""
    framework: str = ""
    mode: str = ""
    # Whether a check that names no backends runs it ("every available backend"). An opt-in backend
    # (False: jax-rev) runs only where named: --backends, gradci.toml's [matrix] backends, a run's.
    default: bool = True
    # Said before the message of each of its cells' errors: how it computes, where its name alone does
    # not say (jax-fwd-rev: forward over reverse).
    composition_note: str = ""

    def computes(self, operator: str) -> bool:
        """Whether the backend has cells of ``operator`` at all: the others are not made, only counted."""
        return True

    def unavailable(self) -> str | None:
        """Why this backend cannot run here at all (framework missing), or None."""
        return None

    def device_unavailable(self, device: str) -> str | None:
        return None

    def dtype_unavailable(self, device: str, dtype: str) -> str | None:
        return None

    def prepare(self, scenario, tangent: Any, device: str, dtype: str) -> Prepared:
        """Make the cell ready to run; raise CellSkipped when it does not apply."""
        raise NotImplementedError

    def vocabulary_error(self) -> str | None:
        """Why this backend's cells could never be stored, or None.

        They could not be for a framework or mode outside the cell contract's vocabularies.
        """
        if self.framework not in FRAMEWORKS:
            return f"backend {self.name!r}: framework {self.framework!r} is not one of {', '.join(FRAMEWORKS)}"
        if self.mode not in MODES:
            return f"backend {self.name!r}: mode {self.mode!r} is not one of {', '.join(MODES)}"
        return None

    def __repr__(self) -> str:
        return f"<Backend {self.name} ({self.framework}, {self.mode})>"
