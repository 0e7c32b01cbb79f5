"""What a device must offer to run a scenario's cells: ``Scenario(requirements={...})``.

Standard library only: the planner reads requirements from a runner's listing without importing any
framework. ``min_memory`` is bytes (an int) or a size string ("16GB", "512MiB"); ``min_capability``
a CUDA compute capability as its digits ("80" for 8.0, "90" for 9.0).
"""
from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any

from scenarios.inputs import ScenarioInputError

UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
         "KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40}
KEYS = ("min_memory", "min_capability")


@dataclasses.dataclass(frozen=True)
class Requirements:
    min_memory_bytes: int | None = None
    min_capability: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The stored and listed shape: only what is required."""
        return {key: value for key, value in (("min_memory_bytes", self.min_memory_bytes),
                                              ("min_capability", self.min_capability)) if value is not None}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> Requirements:
        data = data or {}
        return cls(min_memory_bytes=data.get("min_memory_bytes"), min_capability=data.get("min_capability"))

    def __bool__(self) -> bool:
        return bool(self.to_dict())


def parse_memory(value: Any, scenario: str) -> int:
    if type(value) is int and value > 0:
        return value
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*", value) if isinstance(value, str) else None
    if match and match.group(2).upper() in UNITS and float(match.group(1)) > 0:
        return int(float(match.group(1)) * UNITS[match.group(2).upper()])
    raise ScenarioInputError(f"scenario {scenario!r}: requirements min_memory {value!r} is not a size such as "
                             f"16000000000, \"16GB\" or \"512MiB\"")


def requirements_of(value: Any, scenario: str) -> Requirements:
    """A scenario's ``requirements=`` argument as ``Requirements``; one-line errors naming the scenario."""
    if value is None or isinstance(value, Requirements):
        return value or Requirements()
    if not isinstance(value, Mapping):
        raise ScenarioInputError(f"scenario {scenario!r}: requirements must be a dict with some of "
                                 f"{', '.join(KEYS)}; got {type(value).__name__}")
    unknown = sorted(set(value) - set(KEYS))
    if unknown:
        raise ScenarioInputError(f"scenario {scenario!r}: unknown requirement {unknown[0]!r}; "
                                 f"expected some of {', '.join(KEYS)}")
    capability = value.get("min_capability")
    if capability is not None:
        capability = str(capability).replace(".", "") if isinstance(capability, (str, float, int)) else capability
        if not isinstance(capability, str) or not re.fullmatch(r"\d{2,3}", capability):
            raise ScenarioInputError(f"scenario {scenario!r}: requirements min_capability "
                                     f"{value['min_capability']!r} is not a compute capability such as \"80\" or 8.0")
    memory = value.get("min_memory")
    return Requirements(min_memory_bytes=None if memory is None else parse_memory(memory, scenario),
                        min_capability=capability)
