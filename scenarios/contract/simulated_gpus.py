"""A simulated GPU inventory, for testing GPU paths without a GPU.

``GRADCI_DEVICE_INVENTORY=/path/file.json`` names a JSON list of GPUs (or holds the list itself, as the
workers hand it to their sandboxed runners, which cannot read the file) that device discovery reports
instead of the machine's own (NVML or torch), so that routing, per-device workers and the engine's GPU
path can be tested without a GPU. The list is the GPUs as CUDA would number them for this process
(``cuda:0`` first); CUDA_VISIBLE_DEVICES does not filter it.

The engine runs a simulated ``cuda:N`` cell's computation on the CPU through the same code
(``gradci.scenarios.contract.devices.execution_device``): CPU–GPU agreement, precision records, repeats and routing
all run here; the cells say "simulated" in their precision. Standard library only.
"""
from __future__ import annotations

import functools
import json
import os
import re
from pathlib import Path
from typing import Any

INVENTORY_VARIABLE = "GRADCI_DEVICE_INVENTORY"
EXAMPLE = '[{"name": "NVIDIA H100", "capability": "90", "memory_total": 85899345920}]'
REQUIRED = ("name", "capability", "memory_total")
OPTIONAL = ("memory_free", "driver", "cuda")
JSON_TYPES = {dict: "object", list: "list", str: "string", int: "number", float: "number", bool: "boolean",
              type(None): "null"}


class InventoryError(ValueError):
    pass


def simulated_gpus() -> list[dict[str, Any]] | None:
    """The simulated GPUs of this process's environment; None where no inventory is set."""
    value = os.environ.get(INVENTORY_VARIABLE)
    if not value:
        return None
    try:  # read again when the file changes (cells ask once each)
        changed = None if value.lstrip().startswith("[") else os.stat(value).st_mtime_ns
    except OSError:
        changed = None  # read_simulated_gpus says what is wrong
    return _read_cached(value, changed)


def inline_inventory() -> dict[str, str]:
    """The environment a sandboxed runner needs to see this process's simulated GPUs.

    It holds the list itself (the runner's filesystem view may not hold the file); it is empty where no
    inventory is set.
    """
    gpus = simulated_gpus()
    return {} if gpus is None else {INVENTORY_VARIABLE: json.dumps(gpus)}


@functools.lru_cache(maxsize=8)
def _read_cached(value: str, changed: int | None) -> list[dict[str, Any]]:
    return read_simulated_gpus(value)


def read_simulated_gpus(path: str) -> list[dict[str, Any]]:
    """The GPUs of the file, or of the inline JSON list ``path`` holds.

    Each has every key of REQUIRED and OPTIONAL (memory_free defaults to memory_total, driver and cuda
    to None). A malformed inventory raises InventoryError, one line.
    """
    inline = path.lstrip().startswith("[")

    def refuse(problem: str) -> InventoryError:
        where = "(an inline list)" if inline else path
        return InventoryError(f"{INVENTORY_VARIABLE}={where}: {problem}; expected a JSON list of GPUs "
                              f"such as {EXAMPLE}")

    try:
        entries = json.loads(path if inline else Path(path).read_text())
    except OSError as exc:
        raise refuse(f"cannot read it ({exc.strerror})") from None
    except json.JSONDecodeError as exc:
        raise refuse(f"not JSON ({exc.msg} at line {exc.lineno})") from None
    if not isinstance(entries, list):
        raise refuse(f"it holds a JSON {JSON_TYPES[type(entries)]}, not a list")
    gpus = []
    for position, entry in enumerate(entries):
        problem = _problem(entry)
        if problem:
            raise refuse(f"GPU {position}: {problem}")
        gpus.append({"memory_free": entry["memory_total"], "driver": None, "cuda": None, **entry})
    return gpus


def _problem(entry: Any) -> str | None:
    """What is wrong with one GPU of the file (None: nothing)."""
    if not isinstance(entry, dict):
        return f"a {JSON_TYPES[type(entry)]}, not an object"
    missing = [key for key in REQUIRED if key not in entry]
    unknown = [key for key in entry if key not in REQUIRED + OPTIONAL]
    if missing or unknown:
        return "; ".join(filter(None, [f"missing {', '.join(missing)}" if missing else None,
                                       f"unknown key {', '.join(unknown)}" if unknown else None]))
    if not isinstance(entry["name"], str) or not entry["name"]:
        return f"name {entry['name']!r} is not a non-empty string"
    if not isinstance(entry["capability"], str) or not re.fullmatch(r"\d{2,3}", entry["capability"]):
        return f"capability {entry['capability']!r} is not a string of 2 or 3 digits such as \"90\""
    for key in ("memory_total", "memory_free"):
        value = entry.get(key, 1)
        if type(value) is not int or value <= 0:
            return f"{key} {value!r} is not a positive whole number of bytes"
    for key in ("driver", "cuda"):
        if not isinstance(entry.get(key, ""), str | None):
            return f"{key} {entry[key]!r} is not a string"
    return None
