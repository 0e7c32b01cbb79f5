"""A cell's one verdict against its reference: decided, undecided, or noisy.

The driver asks once (``judge``) with the backend's result and the scenario's reference answer. A
result within tolerance of the reference (widened by both sides' error estimates) passes. One beyond
it fails only where finite differences can decide: a failure is first held against the answer's
steadiness (how the reference wanders with the step, ``ReferenceAnswer.steadiness``), so that a noisy
f or a kink makes the cell an error that says why instead of a false failure.
"""
from __future__ import annotations

import dataclasses
from typing import Any

from gradci.scenarios.authoring.scenario import Scenario, Tangents
from gradci.scenarios.backends.base import ComputedPattern, ReturnedPrimal
from gradci.scenarios.contract.cell import Status
from gradci.scenarios.numerics.reference_values import Reference
from gradci.scenarios.numerics.tolerances import Tolerance
from gradci.scenarios.reference.answer import ReferenceAnswer
from gradci.scenarios.verdict.against_reference import Comparison, compare_to_reference
from gradci.scenarios.verdict.returned_primal import compare_primal
from gradci.scenarios.verdict.sparsity import check_sparsity


def judge(result: Any, scenario: Scenario, answer: ReferenceAnswer, tol: Tolerance,
          own_errors: list[Any] | None = None, primal: ReturnedPrimal | None = None,
          computed_pattern: ComputedPattern | None = None) -> Comparison:
    """The cell's verdict: ``result`` against the reference, noise and kinks ruled out before a failure stands.

    ``own_errors``: the backend's own error estimate per tangent (a finite-difference backend's), added
    to the reference's. ``primal``: f(x) as the backend's transform returned it beside the derivative,
    which must be f(x) (``gradci.scenarios.verdict.returned_primal``); its failure comes first.
    ``computed_pattern``: the sparsity pattern a sparse backend computed from. A nonzero outside the
    scenario's declared pattern, or an entry the backend's pattern leaves out, fails before the values
    (``gradci.scenarios.verdict.sparsity``): it names the entry, and no noise explains it.
    """
    refs = answer.refs
    if own_errors is not None:
        refs = [dataclasses.replace(ref, backend_error=error) for ref, error in zip(refs, own_errors)]
    comparison = compare_all(result, refs, tol, scenario, answer.tangent)
    derivative = _unless_noise(comparison, result, refs, tol, scenario, answer)
    returned = compare_primal(primal, answer.refs, tol, answer.tangent)
    sparsity = check_sparsity(result, scenario, refs, tol, computed_pattern,
                              failed=derivative.status == Status.FAIL)
    derivative = derivative if sparsity.ok else sparsity.merge(derivative)
    return derivative if returned.ok else returned.merge(derivative)


def _unless_noise(comparison: Comparison, result: Any, refs: list[Reference], tol: Tolerance, scenario: Scenario,
                  answer: ReferenceAnswer) -> Comparison:
    """A failing comparison with finite differences, kept only where kinks and noise cannot explain it.

    See ``gradci.scenarios.reference.step_spread``. The failure stands where the result is beyond the
    reference even allowing for how the estimates wander with the step, or beyond what the two largest
    steps agree on (noise below them does not reach them); otherwise it is no verdict: an error that
    says f is noisy. An f that answers differently twice is never decided. At a kink (one-sided
    differences steady but apart), failing or undecided, the error says f may not be differentiable
    there.
    """
    undecided = comparison.status == Status.ERROR and comparison.unreliable
    if not (comparison.status == Status.FAIL or undecided) or not refs or refs[0].method == "analytic":
        return comparison
    try:
        spread = answer.steadiness()
    except Exception:  # noqa: BLE001 -- fixed-step estimates failed (a domain edge within 1e-2): the verdict stands
        return comparison
    if spread.jump is not None and comparison.unreliable:
        # The reference could not step around a jump of f: not the backend's failure, nor gradci's error.
        return dataclasses.replace(comparison, ok=True, message="", unreliable=spread.jump.message())
    if spread.kink is not None:  # no derivative to check: whatever the backend answers is undecidable
        return dataclasses.replace(comparison, ok=True, message="", unreliable=spread.message())
    if spread.outlier_step is not None:
        return _against_small_steps(result, refs, tol, scenario, answer)
    if undecided:
        return comparison
    tangent = answer.tangent
    if spread.reproducible:
        if compare_all(result, spread.widened(refs), tol, scenario, tangent).status == Status.FAIL:
            return comparison
        coarse = compare_all(result, spread.coarse_references(refs), tol, scenario, tangent)
        if coarse.status == Status.FAIL:
            return dataclasses.replace(coarse, message=f"{coarse.message} (against the derivative at steps "
                                                        f"1e-2 and 1e-3: f is noisy at smaller steps)")
    return dataclasses.replace(comparison, ok=True, message="", unreliable=spread.message())


def _small_steps_note(step: float) -> str:
    return (f"(against a reference from steps of {step:g} of x's size and below: the one from larger steps "
            "disagreed with every smaller step, as across a kink or a max-switch of f within them)")


def _against_small_steps(result: Any, refs: list[Reference], tol: Tolerance, scenario: Scenario,
                         answer: ReferenceAnswer) -> Comparison:
    """The verdict against the references from small steps, where the first ones were the outlier.

    A backend's own error estimate (fd's) carries over.
    """
    try:
        again = answer.small_step_references()
    except Exception as exc:  # noqa: BLE001 -- no second reference: no verdict, and why
        return dataclasses.replace(Comparison(ok=True), unreliable=(
            f"reference unreliable: the one from large steps disagrees with smaller steps, and none could be taken "
            f"from small steps ({type(exc).__name__}); give an analytic reference"))
    spread = answer.steadiness()
    if not spread.agrees_below(again):
        return dataclasses.replace(Comparison(ok=True), unreliable=spread.message())
    again = [dataclasses.replace(new, backend_error=old.backend_error) for new, old in zip(again, refs)]
    verdict = compare_all(result, again, tol, scenario, answer.tangent)
    note = _small_steps_note(answer.steadiness().outlier_step or 0.0)
    if verdict.status == Status.FAIL:
        return dataclasses.replace(verdict, message=f"{verdict.message} {note}")
    if verdict.unreliable:
        return dataclasses.replace(verdict, unreliable=f"{verdict.unreliable} {note}")
    return verdict


def compare_all(result: Any, refs, tol: Tolerance, scenario: Scenario, tangent: Any) -> Comparison:
    """``result`` (one per tangent where the tangents are batched) against ``refs``, merged into one."""
    batched = isinstance(tangent, Tangents)
    results = list(result) if batched else [result]
    if len(results) != len(refs):
        return Comparison(ok=False, message=f"{len(results)} results for {len(refs)} tangents")
    total = Comparison(ok=True)
    for one, ref in zip(results, refs):
        total = total.merge(compare_to_reference(one, ref, tol, scenario.operator, scenario.compare,
                                                 x=scenario.x))
    return total
