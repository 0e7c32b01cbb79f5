"""`fd`: the finite-difference reference as a backend of its own.

Its cells recompute each operator with a different stencil order and step schedule than the
reference, so they test the reference itself: where two Richardson schemes disagree the function is
not smooth enough at x for finite differences to be trusted (a kink, a branch, a domain edge), and
where the scenario gives an analytic reference, they test finite differences against it.
"""
from __future__ import annotations


from scenarios.backends.base import Backend, CellSkipped, Prepared
from scenarios.reference import (FULL_FIRST_ORDER_LIMIT, FULL_SECOND_ORDER_LIMIT, INITIAL_STEPS, FDSettings,
                                 ReferenceBuilder, _reference_for)
from scenarios.scenario import Tangents

# Another stencil order and step ladder than the reference's: agreement of the two is the evidence.
CROSS_CHECK = FDSettings(order=4, initial_steps=tuple(step / 5 for step in INITIAL_STEPS), maxiter=12)


class FiniteDifferenceBackend(Backend):
    name, framework, mode = "fd", "numpy", "finite"

    def device_unavailable(self, device: str) -> str | None:
        return None if device == "cpu" else "finite differences run on the CPU only"

    def dtype_unavailable(self, device: str, dtype: str) -> str | None:
        return None if dtype == "float64" else "finite differences are computed in float64 only"

    def prepare(self, scenario, tangent, device, dtype) -> Prepared:
        builder = ReferenceBuilder(scenario, CROSS_CHECK)
        if builder.m > FULL_FIRST_ORDER_LIMIT or (
                scenario.operator in ("hvp", "hessian") and builder.m > FULL_SECOND_ORDER_LIMIT):
            raise CellSkipped("input too large for a full finite-difference operator "
                              "(the other backends are checked through random probes)")
        tangents = list(tangent) if isinstance(tangent, Tangents) else [tangent]
        errors: list = []

        def one(t):
            reference = _reference_for(builder, scenario.operator, t)
            errors.append(reference.full_error)
            if scenario.operator == "value_and_gradient":
                return (reference.value, reference.full)
            return reference.full

        def call():
            errors.clear()
            results = [one(t) for t in tangents]
            return tuple(results) if isinstance(tangent, Tangents) else results[0]

        return Prepared(call=call, to_numpy=lambda tree: tree, inputs=(scenario.x, tangent, scenario.contexts),
                        error_estimate=lambda: list(errors))


def fd_backends() -> list[Backend]:
    return [FiniteDifferenceBackend()]



