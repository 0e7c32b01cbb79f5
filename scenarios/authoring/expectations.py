"""What a scenario declares about its own cells before they run.

``skip`` (not run) and ``xfail`` (known to fail), each for the cells whose backend, device and dtype
match glob patterns.

A scenario gives either a mapping or a sequence of ``Expect``::

    xfail={"jax-fwd": "custom_vjp has no forward mode"}                    # backend pattern → reason
    xfail={("torch-*", "cuda*", "float16"): "upstream #1234: fp16 overflow"}  # (backend, device, dtype)
    xfail=[Expect("upstream #1234", backend="torch-*", raises=RuntimeError)]  # expects that exception

An ``xfail`` naming ``raises`` is met only by an error cell whose exception is an instance of it:
a wrong value, or another exception, stays a ``fail``/``error`` (the cell's message says what was
expected). A cell that passes where a failure was expected is ``xpass``. The first matching
declaration wins; the reason is kept in the cell's message.

Suite-wide expectations come from gradci.toml's ``[[expect]]`` tables (``gradci.scenarios.authoring.project``):
the same fields, a ``scenario`` glob, ``raises`` by class name, and ``match``, a regular expression
the exception's text must contain. They follow the scenario's own declarations.
"""
from __future__ import annotations

import dataclasses
import fnmatch
import re
from collections.abc import Mapping, Sequence
from typing import Any

AXES = ("backend", "device", "dtype")


@dataclasses.dataclass(frozen=True)
class Expect:
    reason: str
    backend: str = "*"
    device: str = "*"
    dtype: str = "*"
    raises: type[BaseException] | tuple[type[BaseException], ...] | str | None = None
    # A regular expression the failing cell's exception text (or message) must contain (re.search).
    match: str | None = None

    def applies_to(self, backend: str, device: str, dtype: str) -> bool:
        return all(fnmatch.fnmatchcase(value, pattern)
                   for value, pattern in zip((backend, device, dtype), (self.backend, self.device, self.dtype)))

    def met_by(self, exception: BaseException | None, message: str = "") -> bool:
        """Whether a failing cell is the failure declared.

        The cell is given by the exception it raised, if any, and its message. ``raises`` given by name
        (gradci.toml's [[expect]]) matches any class of that name, or dotted path, in the exception's
        hierarchy.
        """
        if self.match is not None and not re.search(self.match, str(exception) if exception else message):
            return False
        if self.raises is None:
            return True
        if exception is None:
            return False
        if isinstance(self.raises, str):
            names = {name for kind in type(exception).__mro__ for name in (kind.__name__,
                                                                             f"{kind.__module__}.{kind.__qualname__}")}
            return self.raises in names
        return isinstance(exception, self.raises)

    def describe_raises(self) -> str:
        if isinstance(self.raises, str):
            return self.raises
        kinds = self.raises if isinstance(self.raises, tuple) else (self.raises,)
        return " or ".join(kind.__name__ for kind in kinds if kind is not None)


def expectations(given: Any, kind: str, scenario: str) -> tuple[Expect, ...]:
    """``given`` as Expect records.

    ``given`` is a mapping, a sequence of Expect, or None; anything else is a one-line error naming what
    was given and what is accepted.
    """
    if not given:
        return ()
    if isinstance(given, Mapping):
        return tuple(_from_item(key, reason, kind, scenario) for key, reason in given.items())
    if isinstance(given, Sequence) and not isinstance(given, str) and all(isinstance(e, Expect) for e in given):
        return tuple(_checked(e, kind, scenario) for e in given)
    raise TypeError(f"scenario {scenario!r}: {kind} must be a dict {{backend pattern or (backend, device, "
                    f"dtype) patterns: reason}} or a list of gradci.Expect; got {type(given).__name__} "
                    f"{str(given)[:80]!r}")


def _from_item(key: Any, reason: Any, kind: str, scenario: str) -> Expect:
    patterns = (key,) if isinstance(key, str) else key
    if (not isinstance(patterns, tuple) or not 1 <= len(patterns) <= len(AXES)
            or not all(isinstance(p, str) for p in patterns)):
        raise TypeError(f"scenario {scenario!r}: a {kind} key is a backend pattern or a tuple of up to 3 "
                        f"patterns (backend, device, dtype); got {key!r}")
    return _checked(Expect(reason, **dict(zip(AXES, patterns))), kind, scenario)


def _checked(expect: Expect, kind: str, scenario: str) -> Expect:
    if not isinstance(expect.reason, str) or not expect.reason.strip():
        raise TypeError(f"scenario {scenario!r}: every {kind} needs a reason (a non-empty string); "
                        f"got {expect.reason!r}")
    kinds = expect.raises if isinstance(expect.raises, tuple) else (expect.raises,)
    classes = all(isinstance(k, type) and issubclass(k, BaseException) for k in kinds)
    if expect.raises is not None and not isinstance(expect.raises, str) and not classes:
        raise TypeError(f"scenario {scenario!r}: {kind} raises= must be an exception class or a tuple of them; "
                        f"got {expect.raises!r}")
    if kind == "skip" and expect.raises is not None:
        raise TypeError(f"scenario {scenario!r}: a skipped cell never runs, so skip takes no raises=")
    return expect


def first_applying(declared: Sequence[Expect], backend: str, device: str, dtype: str) -> Expect | None:
    return next((e for e in declared if e.applies_to(backend, device, dtype)), None)
