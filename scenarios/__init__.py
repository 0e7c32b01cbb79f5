"""gradci's checking engine: scenarios × backends × devices × dtypes against finite-difference references.

A library in its own right: no web, database or queue code lives here. Frameworks (torch, jax)
are imported lazily, only when a backend that needs them runs.
"""
from scenarios.operators import OPERATORS
from scenarios.scenario import Scenario, Tangents
from scenarios.arrays import namespace
from scenarios.cell import Cell, STATUSES
from scenarios.tolerances import Tolerance, DEFAULT_TOLERANCES
from scenarios.backends import Backend, backend_names, get_backend
from scenarios.check import check, Report

__all__ = [
    "OPERATORS", "Scenario", "Tangents", "namespace", "Cell", "STATUSES", "Tolerance",
    "DEFAULT_TOLERANCES", "BACKENDS", "Backend", "get_backend", "check", "Report",
]


def __getattr__(name: str):
    # BACKENDS includes third-party backends registered through entry points, so it is computed.
    if name == "BACKENDS":
        return backend_names()
    if name == "library":
        import scenarios.library as library

        return library
    raise AttributeError(f"module 'scenarios' has no attribute {name!r}")
