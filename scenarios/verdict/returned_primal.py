"""The primal a transform returned beside the derivative, against f(x).

A custom rule can compute the derivative right and return another value than the function: a
``jax.custom_vjp`` whose ``fwd`` answers otherwise, a ``custom_jvp`` rule whose primal output is not
f(x), a torch Function that answers otherwise when its input is differentiated. Called alone, f is
right; the value the user's code goes on with after ``jax.vjp`` is not. DIT checks the primal with
every operator that returns one; so does gradci, with the primal the backend's transform returned
(never f evaluated again).
"""
from __future__ import annotations

import numpy as np
import optree

from gradci.scenarios.authoring.scenario import Tangents
from gradci.scenarios.backends.base import ReturnedPrimal
from gradci.scenarios.numerics.reference_values import Reference
from gradci.scenarios.numerics.tolerances import Tolerance
from gradci.scenarios.verdict.against_reference import Comparison, compare_arrays


def compare_primal(primal: ReturnedPrimal | None, refs: list[Reference], tol: Tolerance, tangent: object) -> Comparison:
    """The returned primal against f(x) (the reference's value), within the cell's tolerance.

    A pass where no primal was returned. Where it differs, the message names the transform that
    returned it and the likely culprit.
    """
    if primal is None:
        return Comparison(ok=True)
    values = list(primal.values) if isinstance(tangent, Tangents) else [primal.values]
    total = Comparison(ok=True)
    for value, ref in zip(values, refs):
        total = total.merge(compare_arrays(value, ref.value, optree.tree_map(np.zeros_like, ref.value), tol))
    if total.ok:
        return Comparison(ok=True)
    return Comparison(ok=False, max_abs_err=total.max_abs_err, max_rel_err=total.max_rel_err, atol=total.atol,
                      message=f"the primal that {primal.source} differs from f(x) by {total.max_abs_err:.3g} "
                              f"({total.message}): {primal.culprit}")
