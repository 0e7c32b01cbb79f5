"""gradci's checking engine: scenarios × backends × devices × dtypes against finite-difference references.

A library in its own right: no web, database or queue code lives here. The package's top level is
lazy: ``import scenarios.cell`` (the cell contract the server side and REST clients share) loads
no numpy, scipy or framework; a name below is imported on first use. Frameworks (torch, jax) are
imported only when a backend that needs them runs.
"""
from __future__ import annotations

import importlib
from typing import Any

# Public name -> the module that defines it.
_EXPORTS = {
    "OPERATORS": "scenarios.operators",
    "Scenario": "scenarios.scenario",
    "Tangents": "scenarios.scenario",
    "Expect": "scenarios.expectations",
    "namespace": "scenarios.arrays",
    "Cell": "scenarios.cell",
    "STATUSES": "scenarios.cell",
    "Tolerance": "scenarios.tolerances",
    "DEFAULT_TOLERANCES": "scenarios.tolerances",
    "Backend": "scenarios.backends",
    "backend_names": "scenarios.backends",
    "get_backend": "scenarios.backends",
    "check": "scenarios.checker",
    "Report": "scenarios.checker",
    "Matrix": "scenarios.matrix",
    "current_device": "scenarios.devices",
    "select_scenarios": "scenarios.matrix",
}

__all__ = [*_EXPORTS, "BACKENDS", "library"]


def __getattr__(name: str) -> Any:
    if name == "BACKENDS":
        # Includes third-party backends registered through entry points, so it is computed.
        return importlib.import_module("scenarios.backends").backend_names()
    if name == "library":
        return importlib.import_module("scenarios.library")
    if name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'scenarios' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
