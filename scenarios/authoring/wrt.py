"""``wrt``: differentiating a function of several positional arguments with respect to some of them.

``Scenario(..., f, x=(a, b, c), wrt=(0, 2))`` checks f(a, b, c, *contexts) as a function of (a, c),
with b held fixed; ``wrt=1`` as a function of b alone. The engine itself knows one differentiated
argument and contexts, so the scenario is rewritten once, at construction: x becomes the chosen
arguments (a tuple, or the single one for an int), the held ones follow the contexts, and f (and a
callable reference) becomes a function that puts every argument back in its place before the call.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gradci.scenarios.contract.errors import ScenarioInputError
from gradci.scenarios.numerics.inputs import describe


def chosen_positions(wrt: Any, args: Any, name: str) -> tuple[int, ...]:
    """The validated positions ``wrt`` names among ``args``."""
    if not isinstance(args, (tuple, list)):
        raise ScenarioInputError(f"scenario {name!r}: wrt={wrt!r} needs x to be the tuple of f's positional "
                                 f"arguments; got {describe(args)}")
    positions = (wrt,) if _is_index(wrt) else wrt
    if not (isinstance(positions, (tuple, list)) and positions and all(_is_index(i) for i in positions)):
        raise ScenarioInputError(f"scenario {name!r}: wrt must be an argument's position or a non-empty tuple "
                                 f"of them; got {wrt!r}")
    wrong = [i for i in positions if not 0 <= i < len(args)]
    if wrong:
        raise ScenarioInputError(f"scenario {name!r}: wrt={wrt!r} names positions in x; {wrong[0]} is not one of "
                                 f"0..{len(args) - 1} (x has {len(args)} arguments)")
    if len(set(positions)) != len(positions):
        raise ScenarioInputError(f"scenario {name!r}: wrt={wrt!r} names an argument twice; expected distinct "
                                 f"positions")
    return tuple(positions)


def _is_index(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def split(wrt: Any, args: tuple | list, positions: tuple[int, ...]) -> tuple[Any, tuple]:
    """Split ``args`` into the differentiated arguments and the held ones.

    The differentiated arguments are a tuple, or the single one where ``wrt`` is an int; the held ones
    keep their order.
    """
    chosen = tuple(args[i] for i in positions)
    held = tuple(arg for i, arg in enumerate(args) if i not in positions)
    return (chosen[0] if _is_index(wrt) else chosen), held


def regrouped(fn: Callable, wrt: Any, positions: tuple[int, ...], count: int) -> Callable:
    """``fn`` called the engine's way, with the differentiated arguments first and the held ones last.

    The engine calls ``g(chosen, *rest, *held)`` for ``fn(*args, *rest)``: the held arguments come
    last, after the contexts (and a reference's tangent), so the contexts keep their positions.

    The closure holds ``fn`` and the positions, so the scenario's fingerprint (which hashes what a
    function captures) changes with either.
    """
    held_count = count - len(positions)
    single = _is_index(wrt)

    def with_all_arguments(chosen, *rest):
        rest, held = rest[:len(rest) - held_count], iter(rest[len(rest) - held_count:])
        given = dict(zip(positions, (chosen,) if single else chosen))
        args = [given[i] if i in given else next(held) for i in range(count)]
        return fn(*args, *rest)

    return with_all_arguments
