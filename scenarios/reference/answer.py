"""The reference's one answer for a scenario: its values and how sure they are, or why there are none.

The driver asks once per scenario (``ReferenceCache.answer``) and hands the answer to every cell. A
cell that passes needs only the values and their error bounds. One that would fail asks the answer
whether finite differences can decide here at all (``ReferenceAnswer.steadiness``: how the estimates
wander with the step, a kink, an f that answers differently twice), computed at most once a scenario.
"""
from __future__ import annotations

import dataclasses
import functools
import pickle
import time
from collections import OrderedDict
from typing import Any

import numpy as np

from gradci.scenarios.authoring.exceptions import describe_exception, full_text
from gradci.scenarios.authoring.scenario import Scenario
from gradci.scenarios.contract.cell import MESSAGE_LIMIT
from gradci.scenarios.numerics.reference_values import Reference, flat_leaves
from gradci.scenarios.numerics.sparsity import as_matrix, entry_name, first_entry
from gradci.scenarios.numerics.tolerances import REFERENCE_ERROR_FACTOR, tolerance_for
from gradci.scenarios.reference.evaluation_memo import EvaluationMemo
from gradci.scenarios.reference.finite_differences import compute_references, small_step_references
from gradci.scenarios.reference.step_spread import StepSpread, step_spread
from gradci.scenarios.rules.tracing import reference_record

FLOAT64 = tolerance_for("float64")
# A reference larger than this (a big network's Jacobian) is computed again rather than kept.
KEPT_BYTES = 1 << 20


@dataclasses.dataclass
class ReferenceAnswer:
    """The references of one scenario (one per tangent), or why there are none.

    ``error`` names why the reference could not be made (then ``refs`` is empty and ``detail`` holds the
    exception's full text); ``elapsed_ms`` is what asking took (near 0 where the cache had it).
    """

    scenario: Scenario
    tangent: Any = None
    refs: list[Reference] = dataclasses.field(default_factory=list)
    error: str | None = None
    exception: BaseException | None = None
    detail: str = ""
    elapsed_ms: float | None = None
    # Where a reference computed by an earlier run came from ("run 12 at 3f2a9c1"): none was computed here.
    carried_from: str | None = None
    # Shared by the copies ``ReferenceCache.answer`` hands out: the steadiness is computed once a scenario.
    _learnt: dict[str, Any] = dataclasses.field(default_factory=dict, repr=False)

    @property
    def description(self) -> tuple[str, float | None]:
        """How the references were made, for people, and their largest error estimate (or None)."""
        text, error = describe(self.refs)
        return (f"{text}, carried from {self.carried_from}" if self.carried_from and text else text), error

    @property
    def is_full(self) -> bool:
        """Whether every reference is a full result (no probes, so every element is compared)."""
        return all(ref.is_full for ref in self.refs)

    def steadiness(self) -> StepSpread:
        """How the references wander with the step, at a kink or with an irreproducible f.

        Asked only for a cell that would fail (it costs a few more stencils), and computed once a
        scenario. Raises where f cannot be evaluated at the fixed steps (a domain edge within 1e-2).
        """
        if "steadiness" not in self._learnt:
            self._learnt["steadiness"] = step_spread(self.scenario, self.tangent, self.refs)
        return self._learnt["steadiness"]

    def small_step_references(self) -> list[Reference]:
        """The references again from small steps only, where the steadiness found the first the outlier.

        Computed once a scenario (``finite_differences.small_step_references``).
        """
        if "small steps" not in self._learnt:
            step = self.steadiness().outlier_step
            assert step is not None  # asked only where the steadiness found the outlier
            self._learnt["small steps"] = small_step_references(self.scenario, self.tangent, self.refs, step)
        return self._learnt["small steps"]


def describe(references: list[Reference]) -> tuple[str, float | None]:
    """How references were made, for people, and their largest error estimate.

    The description reads "finite differences, full", "finite differences, 12 probes" or "analytic".
    The estimate is None where none was given.
    """
    if not references:
        return "", None
    first = references[0]
    shape = "full" if first.is_full else f"{sum(len(ref.probes) for ref in references)} probes"
    errors = [flat_leaves(ref.full_error) if ref.is_full else np.array([p.error for p in ref.probes])
              for ref in references if first.method != "analytic"]
    finite = [float(np.max(e[np.isfinite(e)])) for e in errors if np.any(np.isfinite(e))]
    return f"{first.method}, {shape}" if first.method != "analytic" else "analytic", max(finite, default=None)


class ReferenceCache:
    """Answers by scenario fingerprint, computed once however many backends, devices and dtypes.

    f's evaluations are shared by the scenarios of one function (``share_evaluations``). An answer that
    says why there is no reference is not kept: the next check of the scenario tries again. Each answer
    handed out is a copy (with what asking took) that shares what the kept one has learnt.
    """

    def __init__(self, maxsize: int = 4096, share_evaluations: bool = True):
        self._entries: OrderedDict[str, ReferenceAnswer] = OrderedDict()
        self._maxsize = maxsize
        self.memo = EvaluationMemo() if share_evaluations else None
        self._offered: dict[str, tuple[bytes, str]] = {}
        self._kept_for_later: dict[str, KeptReference] = {}

    def offer(self, key: str, payload: bytes, origin: str) -> None:
        """An earlier run's reference for the scenario whose ``cache_key`` is ``key`` (``KeptReference``).

        Used instead of computing it, unless this cache has its own; one that cannot be read is
        computed after all. ``origin`` says where it came from, in the cells' reference description.
        """
        self._offered[key] = (payload, origin)

    def kept_for_later(self) -> list[KeptReference]:
        """The references computed since the last call with the record of what they read, then forgotten."""
        kept, self._kept_for_later = list(self._kept_for_later.values()), {}
        return kept

    def answer(self, scenario: Scenario) -> ReferenceAnswer:
        """The scenario's reference answer: kept, or computed now (a failure is an answer that says why)."""
        start = time.perf_counter()
        try:
            found = self._kept_or_computed(scenario)
        except Exception as exc:  # noqa: BLE001 - a broken scenario is an error cell, never a crashed run
            found = ReferenceAnswer(scenario, error=f"reference failed: {describe_exception(exc, MESSAGE_LIMIT)}",
                                    exception=exc, detail=full_text(exc))
        # Checked outside the cache: the pattern is no part of the fingerprint the answer is kept by.
        contradiction = pattern_contradiction(scenario, found.refs)
        if contradiction:
            found = dataclasses.replace(found, error=contradiction[:MESSAGE_LIMIT], refs=[])
        return dataclasses.replace(found, elapsed_ms=(time.perf_counter() - start) * 1e3)

    def _kept_or_computed(self, scenario: Scenario) -> ReferenceAnswer:
        key = scenario.cache_key()
        if key in self._entries:
            self._entries.move_to_end(key)
            return self._entries[key]
        found = self._offered_answer(scenario, key)
        if found is None:
            with reference_record(scenario.function_fingerprint()) as record:
                tangent, refs = compute_references(scenario, memo=self.memo)
            found = ReferenceAnswer(scenario, tangent, refs)
            if record is not None and (payload := _encoded(tangent, refs)) is not None:
                self._kept_for_later[key] = KeptReference(key, payload, record())
        self._entries[key] = found
        if len(self._entries) > self._maxsize:
            self._entries.popitem(last=False)
        return found

    def _offered_answer(self, scenario: Scenario, key: str) -> ReferenceAnswer | None:
        offered = self._offered.pop(key, None)
        if offered is None:
            return None
        payload, origin = offered
        try:
            # Written by a trusted run's runner, and read here, in a box: never by a server process.
            tangent, refs = pickle.loads(payload)
        except Exception:  # noqa: BLE001 - an unreadable payload is computed anew, never trusted in part
            return None
        if not isinstance(refs, list) or not all(isinstance(ref, Reference) for ref in refs):
            return None
        return ReferenceAnswer(scenario, tangent, refs, carried_from=origin)


@dataclasses.dataclass(frozen=True)
class KeptReference:
    """A reference computed here, for later runs: its cache key, its encoding and its dependency record."""

    key: str
    payload: bytes
    depends: dict[str, Any]


def _encoded(tangent: Any, refs: list[Reference]) -> bytes | None:
    """The reference as the runner keeps it (pickle), or None where it cannot be, or is over ``KEPT_BYTES``."""
    try:
        payload = pickle.dumps((tangent, refs), protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:  # noqa: BLE001 - a value pickle cannot write is simply computed again next time
        return None
    return payload if len(payload) <= KEPT_BYTES else None


def pattern_contradiction(scenario: Scenario, refs: list[Reference]) -> str | None:
    """Why the scenario's declared sparsity pattern is wrong for f, by its full reference, or None.

    Wrong is a reference entry outside the pattern beyond float64's tolerance and the reference's own
    error (an entry inside it that happens to be 0 is allowed: a pattern may be conservative). It is the
    scenario's error, so every cell says so instead of failing a backend. Probes cannot tell: not checked.
    """
    pattern = scenario.sparsity
    if pattern is None or len(refs) != 1 or not refs[0].is_full:
        return None
    ref = refs[0]
    values = as_matrix(ref.full, scenario.x.size) if np.size(ref.full) == pattern.size else None
    if values is None:
        return (f"scenario {scenario.name!r}: sparsity= has {pattern.shape[0]}x{pattern.shape[1]} entries and the "
                f"{scenario.operator} has {np.size(ref.full)} ({np.shape(ref.full)}): declare one entry per element")
    error = as_matrix(ref.full_error, scenario.x.size) if ref.full_error is not None else np.zeros_like(values)
    allowed = FLOAT64.atol * max(1.0, float(np.max(np.abs(values), initial=0.0))) + REFERENCE_ERROR_FACTOR * error
    entry = first_entry(~pattern & (np.abs(values) > allowed))
    if entry is None:
        return None
    return (f"scenario {scenario.name!r}: its declared sparsity pattern leaves out {entry_name(entry)}, where the "
            f"{ref.method} reference is {values[entry]:.6g} (error estimate {error[entry]:.2g}): the pattern is "
            f"wrong for f, the scenario's error and not a backend's; mark that entry True in sparsity=")


@functools.cache
def shared_cache() -> ReferenceCache:
    """The process's cache: what ``gradci.check`` uses when given none."""
    return ReferenceCache()
