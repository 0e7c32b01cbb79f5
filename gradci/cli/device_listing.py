"""``gradci devices``: this machine's devices and what each framework sees, as a table or JSON."""
from __future__ import annotations

import json
from typing import Any

from rich.console import Console
from rich.table import Table

from gradci.scenarios.contract.simulated_gpus import InventoryError
from gradci.scenarios.contract.wording import count_of
from gradci.web.templating import memory
from gradci.worker.device_discovery import device_inventory


def show_devices(as_json: bool) -> int:
    """Print the inventory; 2 when a simulated inventory file is malformed."""
    try:
        inventory = device_inventory()
    except InventoryError as exc:
        Console(stderr=True).print(f"error: {exc}", markup=False, highlight=False, soft_wrap=True)
        return 2
    if as_json:
        print(json.dumps(inventory, indent=2))  # plain: no terminal width may fold it
    else:
        render(inventory, Console())
    return 0


def render(inventory: dict[str, Any], console: Console) -> None:
    devices = Table(title="devices (sm: compute capability)")
    for column in ("device", "name", "sm", "memory free / total", "driver", "cuda", "via"):
        devices.add_column(column, overflow="fold")
    for d in inventory["devices"]:
        name = f"{d['name']}, {count_of(d['cores'], 'core')}" if d.get("cores") else _text(d["name"])
        devices.add_row(d["device"], name, _text(d.get("capability")),
                        f"{memory(d['memory_free'])} / {memory(d['memory_total'])}", _text(d.get("driver")),
                        _text(d.get("cuda")), d["source"])
    console.print(devices)
    frameworks = inventory["frameworks"]
    if "error" in frameworks:
        console.print(f"frameworks: the probe failed: {frameworks['error']}", markup=False, highlight=False)
    else:
        table = Table(title="frameworks")
        for column in ("framework", "version", "cuda", "devices it sees"):
            table.add_column(column, overflow="fold")
        for name, seen in frameworks.items():
            table.add_row(name, seen["version"] or "not installed", _text(seen.get("cuda")),
                          ", ".join(seen["devices"]) or "—")
        console.print(table)
    if inventory["simulated"]:
        console.print(f"GPUs simulated from {inventory['simulated']}: workers serve and routing uses them, "
                      "but the frameworks compute only on the devices they see.", markup=False, highlight=False)


def _text(value: Any) -> str:
    return "—" if value is None else str(value)
