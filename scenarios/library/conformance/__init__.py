"""The framework conformance family: the frameworks' own public functions under every operator.

What a user runs to accept a new driver, CUDA, torch or jax version on their hardware
(``gradci check --family frameworks --devices cuda``): several hundred scenarios over
torch.nn.functional, torch.special, torch.linalg, torch's reductions and scans, jax.numpy, jax.nn,
jax.scipy.special and jax.lax, at input points away from kinks, poles and domain edges. Each scenario
runs only its own framework's backends. Not part of ``gradci.scenarios.library.default()``: it is a suite of
its own, selected with ``gradci.scenarios.library.family("frameworks")``.
"""
from __future__ import annotations

from gradci.scenarios.authoring.scenario import Scenario
from gradci.scenarios.library.conformance import (
    jax_lax,
    jax_nn,
    jax_numpy,
    jax_scipy_special,
    torch_functional,
    torch_linalg,
    torch_reductions,
    torch_special,
)
from gradci.scenarios.library.conformance._table import FAMILY
from gradci.scenarios.library.conformance._table import scenarios as table_scenarios

AREAS = {module.AREA: module.ROWS for module in (torch_functional, torch_special, torch_linalg, torch_reductions,
                                                 jax_numpy, jax_nn, jax_scipy_special, jax_lax)}


def scenarios() -> list[Scenario]:
    return [scenario for area, rows in AREAS.items() for scenario in table_scenarios(area, rows)]


__all__ = ["FAMILY", "AREAS", "scenarios"]
