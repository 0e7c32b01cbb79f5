"""What a device must offer to run a scenario's cells: ``Scenario(requirements={...})``.

Standard library only: the planner reads requirements from a runner's listing without importing any
framework, and decides here whether a device (a worker's device record, or a run's device name)
meets them for a dtype (``unmet``). ``min_memory`` is bytes (an int) or a size string ("16GB",
"512MiB"); ``min_capability`` a CUDA compute capability as its digits ("80" for 8.0, "90" for 9.0).
"""
from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Mapping
from typing import Any

from gradci.scenarios.contract.errors import ScenarioInputError

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


# --- what a device offers, and whether it meets a scenario's needs -----------------------------------

# Dtypes only some GPUs run natively: bfloat16 arithmetic came with Ampere (compute capability 8.0).
# float16 runs on any GPU, and the CPU runs every dtype: no entry.
DTYPE_MIN_CAPABILITY = {"bfloat16": "80"}


def capability_number(capability: str) -> int:
    """A capability as a number ("80" → 80, "100" → 100), so that 10.0 compares above 9.0."""
    return int(capability)


def capability_text(capability: str) -> str:
    """A capability as NVIDIA writes it: "80" → "8.0", "100" → "10.0"."""
    return f"{capability[:-1]}.{capability[-1]}"


def memory_text(size: int) -> str:
    """Bytes as people read a GPU's memory: "42.9 GB"."""
    return f"{size / 10**9:.1f} GB"


@dataclasses.dataclass(frozen=True)
class DeviceOffer:
    """What one device offers: its kind, and a GPU's compute capability and memory.

    ``kind`` is "cpu" or "cuda". None means unknown (a run's ``cuda.sm80`` names a capability, not a
    memory size): an unknown value never counts against a requirement.
    """

    kind: str
    capability: str | None = None
    memory_total: int | None = None
    name: str = ""

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> DeviceOffer:
        """From a device record (``gradci.worker.device_discovery``: a heartbeat's ``versions["device"]``)."""
        kind = record.get("kind") or ("cpu" if record.get("device") == "cpu" else "cuda")
        return cls(kind=kind, capability=record.get("capability"), memory_total=record.get("memory_total"),
                   name=str(record.get("name") or record.get("device") or kind))

    @classmethod
    def of_device(cls, device: str) -> DeviceOffer:
        """What a run's device name promises: ``cpu``, ``cuda.smXY`` (capability XY), ``cuda``/``cuda:N`` (any GPU)."""
        if device == "cpu":
            return cls("cpu", name=device)
        match = re.fullmatch(r"cuda\.sm(\d{2,3})", device)
        return cls("cuda", capability=match.group(1) if match else None, name=device)


def needs(requirements: Requirements, dtypes: Iterable[str] = ()) -> Requirements:
    """What a GPU must offer to run a scenario's cells in ``dtypes``.

    The scenario's own requirements, and the highest compute capability one of the dtypes needs.
    """
    capabilities = [c for c in [requirements.min_capability, *(DTYPE_MIN_CAPABILITY.get(d) for d in dtypes)] if c]
    capability = max(capabilities, key=capability_number) if capabilities else None
    return dataclasses.replace(requirements, min_capability=capability)


def unmet(requirements: Requirements, offer: DeviceOffer, dtype: str | None = None) -> str | None:
    """Why ``offer`` cannot run a cell of a scenario with ``requirements`` in ``dtype``.

    None where it can, as far as is known. A scenario's requirements describe a GPU: the CPU meets none
    of them, and runs every dtype.
    """
    if offer.kind == "cpu":
        return f"requires a GPU ({describe(requirements)}); {offer.name or 'cpu'} is not one" if requirements else None
    need = needs(requirements, [dtype] if dtype else [])
    if (need.min_capability and offer.capability
            and capability_number(offer.capability) < capability_number(need.min_capability)):
        why = f" for {dtype}" if need.min_capability != requirements.min_capability else ""
        return (f"requires compute capability {capability_text(need.min_capability)} or newer{why}; "
                f"{offer.name} has {capability_text(offer.capability)}")
    if need.min_memory_bytes and offer.memory_total is not None and offer.memory_total < need.min_memory_bytes:
        return (f"requires {memory_text(need.min_memory_bytes)} of device memory; "
                f"{offer.name} has {memory_text(offer.memory_total)}")
    return None


def describe(requirements: Requirements) -> str:
    """Requirements in words: "compute capability 8.0 or newer, 16.0 GB of memory"."""
    parts = ([f"compute capability {capability_text(requirements.min_capability)} or newer"]
             if requirements.min_capability else [])
    if requirements.min_memory_bytes:
        parts.append(f"{memory_text(requirements.min_memory_bytes)} of memory")
    return ", ".join(parts) or "nothing"
