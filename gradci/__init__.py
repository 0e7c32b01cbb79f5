"""gradci: derivative checks for JAX and PyTorch, as a library, a command line and a CI service.

It checks scenarios × backends × devices × dtypes against finite-difference references.

The authoring API::

    from gradci import Scenario, Expect, namespace, check

Everything else lives in the layers below: ``gradci.scenarios`` (the checking engine),
``gradci.services`` (the server side), ``gradci.worker``, ``gradci.web`` (the dashboard) and
``gradci.cli`` (the command line, the one place that wires them together).

The names below are imported on first use, so that ``import gradci.services.api.app`` (the API
process) and ``gradci submit`` load no numpy, scipy or framework; the ``TYPE_CHECKING`` block
re-exports the same names explicitly for type checkers and IDEs (a test keeps the two in step).
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gradci.scenarios import library as library
    from gradci.scenarios.authoring.expectations import Expect as Expect
    from gradci.scenarios.authoring.namespace import namespace as namespace
    from gradci.scenarios.authoring.scenario import Scenario as Scenario
    from gradci.scenarios.authoring.scenario import Tangents as Tangents
    from gradci.scenarios.authoring.scenario_tests import scenario_tests as scenario_tests
    from gradci.scenarios.backends import Backend as Backend
    from gradci.scenarios.backends import backend_names as backend_names
    from gradci.scenarios.backends import get_backend as get_backend
    from gradci.scenarios.check import Report as Report
    from gradci.scenarios.check import check as check
    from gradci.scenarios.contract.cell import STATUSES as STATUSES
    from gradci.scenarios.contract.cell import Cell as Cell
    from gradci.scenarios.contract.cell import Status as Status
    from gradci.scenarios.contract.devices import current_device as current_device
    from gradci.scenarios.contract.matrix import Matrix as Matrix
    from gradci.scenarios.contract.matrix import select_scenarios as select_scenarios
    from gradci.scenarios.numerics.tolerances import DEFAULT_TOLERANCES as DEFAULT_TOLERANCES
    from gradci.scenarios.numerics.tolerances import Tolerance as Tolerance
    from gradci.scenarios.operators.records import OPERATORS as OPERATORS

# Public name -> the module that defines it (the same pairs as the block above).
_EXPORTS = {
    "Scenario": "gradci.scenarios.authoring.scenario",
    "Tangents": "gradci.scenarios.authoring.scenario",
    "Expect": "gradci.scenarios.authoring.expectations",
    "scenario_tests": "gradci.scenarios.authoring.scenario_tests",
    "namespace": "gradci.scenarios.authoring.namespace",
    "check": "gradci.scenarios.check",
    "Report": "gradci.scenarios.check",
    "Cell": "gradci.scenarios.contract.cell",
    "STATUSES": "gradci.scenarios.contract.cell",
    "Status": "gradci.scenarios.contract.cell",
    "Tolerance": "gradci.scenarios.numerics.tolerances",
    "DEFAULT_TOLERANCES": "gradci.scenarios.numerics.tolerances",
    "OPERATORS": "gradci.scenarios.operators.records",
    "Backend": "gradci.scenarios.backends",
    "backend_names": "gradci.scenarios.backends",
    "get_backend": "gradci.scenarios.backends",
    "Matrix": "gradci.scenarios.contract.matrix",
    "select_scenarios": "gradci.scenarios.contract.matrix",
    "current_device": "gradci.scenarios.contract.devices",
}

# Spelled out, not built from _EXPORTS, so that type checkers can read it; tests/test_public_api.py keeps
# it in step with the block above.
__all__ = [
    "Scenario", "Tangents", "Expect", "scenario_tests", "namespace", "check", "Report", "Cell", "STATUSES",
    "Status", "Tolerance", "DEFAULT_TOLERANCES", "OPERATORS", "Backend", "backend_names", "get_backend", "Matrix",
    "select_scenarios", "current_device", "library",
]


def __getattr__(name: str) -> Any:
    if name == "library":
        value = importlib.import_module("gradci.scenarios.library")
    elif name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name]), name)
    else:
        raise AttributeError(f"module 'gradci' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
