"""`fd`: the finite-difference reference as a backend of its own.

Its cells recompute each operator with a different stencil order and step schedule than the
reference, so they test the reference itself: where two Richardson schemes disagree the function is
not smooth enough at x for finite differences to be trusted (a kink, a branch, a domain edge), and
where the scenario gives an analytic reference, they test finite differences against it.
"""
from __future__ import annotations

from gradci.scenarios.authoring.scenario import Tangents
from gradci.scenarios.backends.base import Backend, CellSkipped, Prepared
from gradci.scenarios.operators.records import OPERATOR_RECORDS
from gradci.scenarios.reference.finite_differences import INITIAL_STEPS, FDSettings, ReferenceBuilder

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
        record = OPERATOR_RECORDS[scenario.operator]
        # This backend gives full results only: none past the sizes where references turn to probes.
        if builder.probes_needed(record.order):
            raise CellSkipped("input too large for a full finite-difference operator "
                              "(the other backends are checked through random probes)")
        tangents = list(tangent) if isinstance(tangent, Tangents) else [tangent]
        errors: list = []

        def one(t):
            reference = record.finite_differences(builder, t)
            errors.append(reference.full_error)
            if record.returns_value:
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



