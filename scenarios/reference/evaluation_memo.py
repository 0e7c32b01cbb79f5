"""f's evaluations shared by the scenarios of one function in one run.

A library states one function at one point under several operators (gradient, hvp, hessian,
jacobian...): their finite differences evaluate f at many of the same points (the Hessian's outer
stencil is centred on the gradient's), and each needs f(x). Scenarios share evaluations when their
``Scenario.function_fingerprint`` (code, contexts, state, x's structure) is the same.
"""
from __future__ import annotations

import itertools
from collections import OrderedDict

import numpy as np

from gradci.scenarios.authoring.scenario import Scenario
from gradci.scenarios.reference.flat_function import FlatFunction

# Bounds: stored values by their bytes (a probe point of a large network is megabytes), flat
# functions (each holds f(x)) by count. Least recently used first out.
MAX_BYTES = 256 << 20
MAX_FUNCTIONS = 1024
# Lines through x (a probe's or a jvp's direction) known by number, most recent first out: a line
# forgotten only costs its points' reuse, never a wrong value.
MAX_LINES = 64


class EvaluationMemo:
    def __init__(self, max_bytes: int = MAX_BYTES, max_functions: int = MAX_FUNCTIONS):
        self._values: OrderedDict[tuple[str, bytes], np.ndarray] = OrderedDict()
        self._functions: OrderedDict[tuple[str, str], FlatFunction] = OrderedDict()
        self._lines: OrderedDict[int, tuple[tuple[str, int, float], np.ndarray]] = OrderedDict()
        self._line_numbers = itertools.count()
        self._bytes = 0
        self._max_bytes, self._max_functions = max_bytes, max_functions
        self.hits = self.misses = 0

    def flat_function(self, scenario: Scenario) -> FlatFunction:
        """The scenario's FlatFunction, f(x) evaluated once for all scenarios of its function at x."""
        key = (scenario.function_fingerprint(), scenario.point_fingerprint())
        g = self._functions.get(key)
        if g is None:
            g = self._functions[key] = FlatFunction(scenario)
            if len(self._functions) > self._max_functions:
                self._functions.popitem(last=False)
        else:
            self._functions.move_to_end(key)
            g.check_output(scenario.operator)
        return g

    def line_number(self, function: str, origin: int, scale: float, direction: np.ndarray) -> int:
        """A number for the line origin + s·scale·direction, the same for an equal line.

        ``function`` is the line's function and ``origin`` the token of the flat function at x. The
        number keys the line's points. It is found by comparing directions (only those of lines with the
        same function, origin and scale), so that no point of a line is ever copied or hashed, and two
        lines share points only where they are equal.
        """
        key = (function, origin, scale)
        for number, (other, known) in self._lines.items():
            if other == key and known.shape == direction.shape and np.array_equal(known, direction):
                self._lines.move_to_end(number)
                return number
        number = next(self._line_numbers)
        self._lines[number] = (key, direction)
        if len(self._lines) > MAX_LINES:
            self._lines.popitem(last=False)
        return number

    def served_at_x(self) -> None:
        """Count f(x), which a flat function already holds, asked for again: an evaluation shared."""
        self.hits += 1

    def lookup(self, function: str, point: bytes) -> np.ndarray | None:
        value = self._values.get((function, point))
        if value is None:
            self.misses += 1
            return None
        self.hits += 1
        self._values.move_to_end((function, point))
        return value

    def store(self, function: str, point: bytes, value: np.ndarray) -> None:
        key = (function, point)
        if key in self._values:
            return
        self._values[key] = value
        self._bytes += len(point) + value.nbytes
        while self._bytes > self._max_bytes and self._values:
            (_, old_point), old = self._values.popitem(last=False)
            self._bytes -= len(old_point) + old.nbytes

    @property
    def hit_rate(self) -> float:
        return self.hits / max(1, self.hits + self.misses)

