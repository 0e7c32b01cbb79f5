"""What a reference is: a full float64 result or probes of it, each with its error estimate.

A leaf: the operator records build these, the finite-difference builder fills them and the verdict
compares against them, so it imports nothing of gradci's.
"""
from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import optree


@dataclasses.dataclass
class Probe:
    u: np.ndarray            # direction in the (flattened) input space
    w: np.ndarray | None     # for matrix results (jacobian, hessian): the left direction; else None
    value: float             # the reference's w·R·u (matrix results) or u·R (results like x)
    error: float             # its error estimate


@dataclasses.dataclass
class Reference:
    """The reference for one tangent: a full result, or probes. ``value`` is f(x)."""

    value: Any
    full: Any = None
    full_error: Any = None
    probes: list[Probe] = dataclasses.field(default_factory=list)
    method: str = "finite differences"
    # A backend that is itself an approximation (fd) adds its own error estimate here: it widens the
    # threshold like the reference's, but only the reference's own decides whether it can decide.
    backend_error: Any = None

    @property
    def is_full(self) -> bool:
        return self.full is not None


class ReferenceUnavailable(Exception):
    """Finite differences found no finite derivative at x: the scenario needs an analytic reference."""


def flat_leaves(tree: Any) -> np.ndarray:
    """Every leaf of a pytree (a reference's result or error), float64, in one vector."""
    return np.concatenate([np.ravel(np.asarray(leaf, dtype=np.float64))
                           for leaf in optree.tree_leaves(tree, none_is_leaf=True)] or [np.zeros(0)])
