"""The arithmetic precision a cell runs with beyond its dtype: ``Scenario(precision=...)``.

``None``: the frameworks' defaults, whatever they are on the machine (torch's TF32 switches, JAX's
default matmul precision), recorded with each cell. ``"highest"``: full precision of the dtype (TF32
off, JAX "highest"). ``"tf32"``: TF32 allowed for float32 matmuls and convolutions (JAX "tensorfloat32").

Each framework adapter reads and pins its own switches (``precision_text``, ``pinned_precision``,
``tf32_active``); the checker applies a scenario's pin around each of its cells, records the text in
``Cell.precision`` while the pin holds, and gives a float32 cell that ran in TF32 on a GPU the TF32
tolerance (``gradci.scenarios.numerics.tolerances``).
"""
from __future__ import annotations

from typing import Any

from gradci.scenarios.contract.errors import ScenarioInputError

SETTINGS = ("highest", "tf32")


def precision_setting(value: Any, scenario: str) -> str | None:
    if value is None or value in SETTINGS:
        return value
    raise ScenarioInputError(f"scenario {scenario!r}: precision {value!r} is not one of None (the frameworks' "
                             f"defaults), {', '.join(repr(s) for s in SETTINGS)}")


def on_off(flag: bool) -> str:
    return "on" if flag else "off"
