"""The verdict on a prepared program run at a second point x₁ and at x₀ again, each against its reference.

A cell's program is prepared (compiled, traced) at x₀ and passed there. Run at x₁ it must give x₁'s
derivative, and run at x₀ again x₀'s: a program that kept a branch frozen when it was traced, a value a
rule cached at its first call, or a buffer not re-zeroed between calls fails one of the two. Where the
numbers show what happened (the derivative at x₁ is x₀'s; the one at x₀ again is x₁'s), the message
says so.
"""
from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from gradci.scenarios.authoring.scenario import Scenario
from gradci.scenarios.contract.cell import Status
from gradci.scenarios.numerics.reference_values import flat_leaves
from gradci.scenarios.numerics.tolerances import Tolerance
from gradci.scenarios.reference.answer import ReferenceAnswer
from gradci.scenarios.verdict.judgement import judge


@dataclasses.dataclass
class Elsewhere:
    """What a cell's program gave: at x₀ first, at x₁, then at x₀ again (numpy results)."""

    first: Any
    second: Any
    back: Any


@dataclasses.dataclass
class ElsewhereVerdict:
    """FAIL with what happened, or PASS with a note (empty where there is nothing to say)."""

    status: Status
    message: str = ""


def judge_elsewhere(results: Elsewhere, scenario: Scenario, answer: ReferenceAnswer, second: ReferenceAnswer,
                    tol: Tolerance, where: str) -> ElsewhereVerdict:
    """The program's results at x₁ (``second``'s scenario) and at x₀ again, each against its reference.

    ``where`` says what x₁ is (drawn near x₀, declared), for the message.
    """
    at_second = judge(results.second, second.scenario, second, tol)
    if at_second.status == Status.FAIL:
        if _alike(results.second, results.first, tol):
            return ElsewhereVerdict(Status.FAIL, f"prepared at x₀, the derivative at x₁ equals the one at x₀ (x₁: "
                                                 f"{where}): the program kept what it computed at x₀ (a value "
                                                 f"cached at its first call, a branch frozen when it was traced)")
        return ElsewhereVerdict(Status.FAIL, f"the program, prepared at x₀, gives a wrong derivative at x₁ ({where}): "
                                             f"{at_second.message}")
    back = judge(results.back, scenario, answer, tol)
    if back.status == Status.FAIL:
        if _alike(results.back, results.second, tol):
            return ElsewhereVerdict(Status.FAIL, f"after a run at x₁ ({where}), the program gives x₁'s derivative "
                                                 f"at x₀ again: it keeps state between calls")
        return ElsewhereVerdict(Status.FAIL, f"after a run at x₁ ({where}), the program gives a wrong derivative at "
                                             f"x₀ again: {back.message}: it keeps state between calls (a buffer "
                                             f"not re-zeroed, a value cached at a call)")
    undecided = at_second.unreliable or back.unreliable
    return ElsewhereVerdict(Status.PASS, f"note: not decided at x₁ ({where}): {undecided}" if undecided else "")


def _alike(a: Any, b: Any, tol: Tolerance) -> bool:
    """Whether two results of the program are equal within the cell's tolerance (shapes included)."""
    a, b = flat_leaves(a), flat_leaves(b)
    if a.shape != b.shape:
        return False
    scale = max(1.0, float(np.max(np.abs(b), initial=0.0, where=np.isfinite(b))))
    return bool(np.allclose(a, b, rtol=tol.rtol, atol=tol.atol * scale, equal_nan=True))
