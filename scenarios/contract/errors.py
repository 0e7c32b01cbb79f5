"""The error a scenario's own declaration raises, at construction.

One line, what was given and what was expected. Standard library only, so that the contract's records
(requirements, precision) raise it without loading numpy.
"""
from __future__ import annotations


class ScenarioInputError(ValueError):
    """A scenario built from inputs the engine cannot differentiate: one line, what was given and expected."""
