"""How a framework backend runs a cell whose scenario has complex x.

The scenario keeps x as (real, imaginary) pairs, and its reference and verdict see only those
(``gradci.scenarios.numerics.complex_parts``). A cell joins the pairs into the framework's complex
arrays (complex128 for a float64 cell, complex64 for float32), takes f's complex outputs apart
into pairs inside the differentiated function, and brings the framework's result to pairs in torch's
convention (``gradci.scenarios.numerics.complex_conventions``), which is what the reference computes.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gradci.scenarios.authoring.scenario import map_tangents
from gradci.scenarios.backends.base import CellSkipped
from gradci.scenarios.numerics import complex_conventions
from gradci.scenarios.numerics.complex_parts import COMPLEX_DTYPES, PARTS_DTYPES, outputs_as_pairs, tree_as_pairs
from gradci.scenarios.operators.records import OPERATOR_RECORDS


class ComplexCell:
    """One cell of a complex-x scenario: what its backend hands the framework and how it reads the result.

    ``over_pairs`` (why, or "") where the framework's transform refuses complex inputs: x then stays
    pairs and f joins them inside, so the result is already pairs.
    """

    def __init__(self, scenario: Any, framework: str, definition: str, dtype: str):
        if dtype not in COMPLEX_DTYPES:
            raise CellSkipped(f"x is complex, and {dtype} has no complex type in both frameworks (complex cells run "
                              f"in {', '.join(f'{c} for {d}' for d, c in COMPLEX_DTYPES.items())})")
        self.parts = scenario.complex_parts
        self.framework = framework
        record = OPERATOR_RECORDS[scenario.operator]
        self.takes_tangent = record.takes_tangent
        self.over_pairs = complex_conventions.refusal(framework, definition, scenario.operator,
                                                      record.per_input_in_forward)
        applied = complex_conventions.applied(framework, scenario.operator, self.over_pairs)
        self.convention = f"x {COMPLEX_DTYPES[dtype]}; {applied}"

    def function(self, fn: Callable) -> Callable:
        """f as the framework differentiates it: its complex outputs as pairs, and x too where over pairs."""
        return self.parts.over_pairs(fn) if self.over_pairs else outputs_as_pairs(fn)

    def inputs(self, x: Any, tangent: Any) -> tuple[Any, Any]:
        """x (and a tangent like it) as the framework takes them: complex, unless over pairs.

        Numpy, before conversion. A cotangent is like f's outputs as pairs, real: it stays as it is.
        """
        if self.over_pairs:
            return x, tangent
        if self.takes_tangent:
            tangent = map_tangents(self.parts.joined, tangent)
        return self.parts.joined(x), tangent

    def to_numpy(self, to_numpy: Callable[[Any], Any]) -> Callable[[Any], Any]:
        """The adapter's ``to_numpy`` followed by the convention, as pairs."""
        def read(tree: Any) -> Any:
            return tree_as_pairs(complex_conventions.read(self.framework, to_numpy(tree), bool(self.over_pairs)))

        return read

    @staticmethod
    def result_dtypes(result_dtypes: Callable[[Any], set[str]]) -> Callable[[Any], set[str]]:
        """A result's dtypes with a complex one named by its parts' (complex64 is a float32 cell's)."""
        return lambda tree: {PARTS_DTYPES.get(dtype, dtype) for dtype in result_dtypes(tree)}
