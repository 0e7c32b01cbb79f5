"""``gradci.scenarios.contract.cell.Cell``'s fields as pydantic field definitions.

They serve the records of the server side that hold cells (the API's stored cell, the report's
changed cell): the cell's types and defaults, its vocabularies as enumerations — so that no record
restates them by hand.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any, Literal, get_type_hints

from pydantic import BaseModel, create_model

from gradci.scenarios.contract.cell import FIELD_NAMES, FIELDS, VOCABULARIES, Cell, stored_values


def cell_fields(names: Iterable[str] = FIELD_NAMES, *, required: bool = False) -> dict[str, Any]:
    """``{name: (type, default)}`` for ``pydantic.create_model``; ``required``: no defaults."""
    hints = get_type_hints(Cell)
    defaults = {field.name: field.default for field in FIELDS}
    out: dict[str, Any] = {}
    for name in names:
        kind = Literal[stored_values(name)] if name in VOCABULARIES else hints[name]
        default = defaults[name]
        out[name] = (kind, ... if required or default is dataclasses.MISSING else default)
    return out


def cell_record(name: str, base: type[BaseModel], names: Iterable[str] = FIELD_NAMES, *, required: bool = False,
                doc: str | None = None, **more: Any) -> type[BaseModel]:
    """A pydantic record ``name`` on ``base`` holding the cell's fields ``names`` and ``more`` fields.

    ``more`` may also give a cell field another type. Type checkers cannot see its fields: the modules
    that use it declare the record as ``Any`` for them.
    """
    return create_model(name, __base__=base, __doc__=doc, **{**cell_fields(names, required=required), **more})
