"""A derivative must come back in its input's dtype: a float32 model's gradient in float64 is a bug.

A rule that computes or returns in another dtype (a custom backward answering float64 for float32
inputs, a bfloat16 gradient silently upcast to float32) costs memory and time, and hands the
optimiser a dtype the model does not have. The frameworks' own derivatives keep the input's dtype.

What is allowed, per result array: the cell's dtype (x's, cast to it), and any dtype f itself returns.
f that answers float64 for float32 inputs (a float64 constant in its closure) already gets a note on
the cell, and forward mode then carries f's dtype into Jacobians and JVPs (jax.jacfwd and torch.func's
tangents are f(x)'s dtype, reverse mode's cotangents x's): both are the frameworks' rules, not a bug.
"""
from __future__ import annotations

from collections.abc import Callable

from gradci.scenarios.numerics.complex_parts import COMPLEX_DTYPES


def named(dtype: str, complex_x: bool) -> str:
    """A real dtype as a cell of complex x shows it: float32 is complex64 there (its results' parts are float32)."""
    return COMPLEX_DTYPES.get(dtype, dtype) if complex_x else dtype


def wider_dtype_note(dtype: str, complex_x: bool = False) -> str:
    """The note on a cell of ``dtype`` whose f answers in float64 (complex128 where x is complex)."""
    if complex_x:
        return (f"note: f returns complex128 (or float64) for {named(dtype, True)} inputs (a complex128 or float64 "
                f"constant in its closure or contexts?): this cell checks complex128 arithmetic")
    return (f"note: f returns float64 for {dtype} inputs (a float64 constant in its closure or contexts?): "
            f"this cell checks float64 arithmetic")


def derivative_dtype_message(got: set[str], dtype: str, f_returns: Callable[[], set[str]] | None,
                             complex_x: bool = False) -> str:
    """Why the result's dtypes are wrong for a cell of ``dtype``, or "" where they are right.

    ``f_returns()`` gives the dtypes f returns for inputs of ``dtype``; it is asked only where a result
    array is in another dtype than the cell's (it evaluates or traces f). A cell of complex x reads its
    results' dtypes by their parts (complex64 as float32) and names them complex (``complex_x``).
    """
    other = got - {dtype}
    if not other:
        return ""
    returned = _dtypes_f_returns(f_returns)
    other -= returned
    if not other:
        return ""
    f_says = ", ".join(sorted(named(d, complex_x) for d in returned)) or "nothing readable"
    return (f"the derivative comes back in {', '.join(sorted(named(d, complex_x) for d in other))} for "
            f"{named(dtype, complex_x)} inputs (f returns {f_says}): "
            f"a rule that casts its result? return the derivative in the input's dtype (in torch's forward "
            f"mode, a 0-d tensor times a Python float is promoted: pytorch#90065)")


def _dtypes_f_returns(f_returns: Callable[[], set[str]] | None) -> set[str]:
    if f_returns is None:
        return set()
    try:
        return set(f_returns())
    except Exception:  # noqa: BLE001 -- f's dtypes only widen what is allowed; without them the cell's dtype stands
        return set()
