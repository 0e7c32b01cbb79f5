"""What a check or a run covers — the one ``Matrix`` type — and the one rule that selects scenarios.

Standard library only: ``gradci check``, ``gradci submit``, ``POST /api/runs``, the planner and
``gradci.toml`` all use this module, and REST clients must not load numpy for it.

**Selection syntax.** A pattern with a wildcard (``*``, ``?``, ``[…]``) is a glob over the whole
scenario name; a plain word matches where it occurs in the name (``nn`` selects ``nn/chain/…`` and
``elementary/…/nn…`` alike, as ``pytest -k`` does). A list of patterns selects the union, in the
order scenarios are listed. ``exact_pattern(name)`` selects one scenario by its full name.
"""
from __future__ import annotations

import dataclasses
import fnmatch
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

AXES = ("backends", "devices", "dtypes")
FIELDS = (*AXES, "scenarios")
WILDCARDS = "*?["

T = TypeVar("T")


class MatrixError(ValueError):
    """A matrix given in the wrong shape (an axis that is not a list of strings, an unknown key)."""


@dataclasses.dataclass(frozen=True)
class Matrix:
    """Backends × devices × dtypes, and the scenario patterns.

    None on a field means "whatever the configuration enables" (every available backend, the default
    devices, each scenario's own dtypes, every scenario).
    """

    backends: tuple[str, ...] | None = None
    devices: tuple[str, ...] | None = None
    dtypes: tuple[str, ...] | None = None
    scenarios: tuple[str, ...] | None = None

    @classmethod
    def of(cls, **fields: Iterable[str] | str | None) -> Matrix:
        """From lists (or, for ``scenarios``, one pattern); empty lists mean None."""
        unknown = set(fields) - set(FIELDS)
        if unknown:
            raise MatrixError(f"unknown keys {sorted(unknown)}; expected {list(FIELDS)}")
        return cls(**{name: _strings(name, fields.get(name)) for name in FIELDS})

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any] | None) -> Matrix:
        """From a stored run matrix, a ``[matrix]`` table or a request body (keys with None ignored)."""
        if data is None:
            return cls()
        if not isinstance(data, Mapping):
            raise MatrixError(f"a matrix must be a table, not {type(data).__name__}")
        return cls.of(**{key: value for key, value in data.items() if value is not None})

    def to_mapping(self) -> dict[str, list[str] | None]:
        """The stored (JSON) shape: lists, or None."""
        return {name: None if getattr(self, name) is None else list(getattr(self, name)) for name in FIELDS}

    def overridden(self, other: Matrix) -> Matrix:
        """``other``'s fields win where it sets them (flags over gradci.toml, a run over the file)."""
        return Matrix(**{name: getattr(other, name) if getattr(other, name) is not None else getattr(self, name)
                         for name in FIELDS})


def _strings(name: str, value: Iterable[str] | str | None) -> tuple[str, ...] | None:
    if value is None:
        return None
    if isinstance(value, str):
        if name != "scenarios":
            raise MatrixError(f"matrix {name} must be a list of strings, not a string")
        value = [value]
    if not isinstance(value, (list, tuple)) or not all(isinstance(item, str) for item in value):
        raise MatrixError(f"matrix {name} must be a list of strings")
    return tuple(dict.fromkeys(value)) or None


def matches(name: str, pattern: str) -> bool:
    """The selection rule: a glob when the pattern has a wildcard, else a substring."""
    if any(ch in pattern for ch in WILDCARDS):
        return fnmatch.fnmatchcase(name, pattern)
    return pattern in name


def select_scenarios(items: Sequence[T], patterns: str | Sequence[str] | None,
                     name: Callable[[T], str] = lambda item: item.name) -> list[T]:  # type: ignore[attr-defined]  # by default, T has a name
    """The items whose name matches one of ``patterns`` (all of them when there is none), in order."""
    if not patterns:
        return list(items)
    chosen = [patterns] if isinstance(patterns, str) else list(patterns)
    return [item for item in items if any(matches(name(item), pattern) for pattern in chosen)]


def exact_pattern(name: str) -> str:
    """A pattern that selects exactly the scenario ``name``.

    Its glob characters are escaped, and its last character bracketed so that the pattern counts as a
    glob (a plain word is a substring).
    """
    escaped = "".join(f"[{ch}]" if ch in WILDCARDS else ch for ch in name[:-1])
    return escaped + f"[{name[-1]}]" if name else name
