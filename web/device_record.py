"""How the dashboard shows a device record: the facts a person asks for, in words and in their order.

A device record (``gradci.worker.device_discovery.device_record``) is what a job's cells were
computed on, as the job stores it and a worker's heartbeat carries it in ``versions["device"]``.
A record may be missing (jobs of older runs, a worker that never beat) or hold only some keys (a CPU
has no driver): what is not there is left out, never guessed.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gradci.scenarios.contract import requirements
from gradci.web.templating import memory

FRAMEWORK_ORDER = ("torch", "jax", "jaxlib")


def capability_text(capability: Any) -> str | None:
    """CUDA's compute capability as its record keeps it ("90") the way NVIDIA writes it ("9.0")."""
    text = str(capability or "")
    return requirements.capability_text(text) if text.isdigit() and len(text) >= 2 else (text or None)


def frameworks(record: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(framework, version) for each framework the record names: "not installed" where it is None."""
    found = record.get("frameworks") or {}
    if not isinstance(found, Mapping):
        return []
    names = [name for name in FRAMEWORK_ORDER if name in found] + sorted(set(found) - set(FRAMEWORK_ORDER))
    return [(name, str(found[name]) if found[name] else "not installed") for name in names
            if not isinstance(found[name], Mapping)]


def device_facts(record: Mapping[str, Any] | None) -> list[tuple[str, str]]:
    """(label, value) rows of a device record, for the cell page's table; [] for no record."""
    if not record:
        return []
    facts: list[tuple[str, Any]] = [
        ("device", record.get("device")), ("model", record.get("name")),
        ("compute capability", capability_text(record.get("capability"))),
        ("cores", record.get("cores")), ("NVIDIA driver", record.get("driver")), ("CUDA (driver)", record.get("cuda")),
        ("memory total", record.get("memory_total") and memory(record["memory_total"])),
        ("memory free", record.get("memory_free") and memory(record["memory_free"])),
        ("CUDA_VISIBLE_DEVICES", record.get("cuda_visible_devices")),
        ("runner memory caps", ", ".join(f"{key} {value}" for key, value in (record.get("memory_caps") or {}).items())),
        *frameworks(record),
        ("inventory source", record.get("source")),
    ]
    return [(label, str(value)) for label, value in facts if value not in (None, "")]


def device_summary(record: Mapping[str, Any] | None) -> str:
    """One line for the workers page: "NVIDIA H100 · sm_90 · driver 550.54.15 · CUDA 12.4"."""
    if not record:
        return ""
    capability = record.get("capability")
    parts = [record.get("name"), capability and f"sm_{capability}", record.get("cores") and f"{record['cores']} cores",
             record.get("driver") and f"driver {record['driver']}", record.get("cuda") and f"CUDA {record['cuda']}"]
    return " · ".join(str(part) for part in parts if part)
