"""The record of one checked cell — scenario × backend × device × dtype — and its vocabularies.

This module is the contract between the engine, the store, the API and the reports: the stored
columns, the API schema, the database's check constraints and ingestion's validation are all
derived from ``Cell`` and the tuples below. It imports nothing but the standard library, so that
the server side and REST clients can use it without loading numpy or a framework.
"""
from __future__ import annotations

import dataclasses
import enum
import keyword
import math
from collections.abc import Mapping
from typing import Any


class Vocabulary(enum.StrEnum):
    """A closed set of stored words.

    Members are ``str``: stored values, JSON and comparisons with plain strings are those of the words
    themselves (``Status.PASS == "pass"``).
    """

    @classmethod
    def values(cls) -> tuple[str, ...]:
        return tuple(member.value for member in cls)


class Status(Vocabulary):
    """A cell's verdict: the one vocabulary of the engine, the store, the API and the dashboard."""

    PASS = "pass"
    FAIL = "fail"
    ERROR = "error"
    SKIP = "skip"
    XFAIL = "xfail"  # failed as declared (Expect / xfail)
    XPASS = "xpass"  # passed though declared to fail


STATUSES = Status.values()
# Statuses that make a check (and `gradci check`) unsuccessful; a rerun repeats them.
FAILING = frozenset({Status.FAIL.value, Status.ERROR.value, Status.XPASS.value})
# Gradient coverage = pass / (pass + fail + error): skips and declared failures are shown, not counted.
COUNTED = (Status.PASS.value, Status.FAIL.value, Status.ERROR.value)

# The derivative operators (their definitions: scenarios.operators.OPERATOR_RECORDS).
OPERATORS = (
    "derivative",
    "second_derivative",
    "gradient",
    "value_and_gradient",
    "jacobian",
    "jvp",
    "vjp",
    "hvp",
    "hessian",
)
MODES = ("reverse", "forward", "finite")
# The frameworks a backend computes with ("numpy": the finite-difference reference backend).
FRAMEWORKS = ("jax", "torch", "numpy")
# Those a scenario gives f for (a dict of f by framework): a backend of another gets no cell of it.
DIFFERENTIATING = ("jax", "torch")
DTYPES = ("float64", "float32", "float16", "bfloat16")

# Which vocabulary each constrained field takes its values from.
VOCABULARIES: dict[str, tuple[str, ...]] = {
    "status": STATUSES,
    "operator": OPERATORS,
    "mode": MODES,
    "framework": FRAMEWORKS,
    "dtype": DTYPES,
}
# The fields that identify a cell within a run.
# A cell's message is one paragraph for people; its full text goes to ``detail``.
MESSAGE_LIMIT = 500
KEY_FIELDS = ("scenario", "backend", "device", "dtype")
# The longest key values the store keeps (its column widths come from here).
KEY_LENGTHS = {"scenario": 255, "backend": 64, "device": 32, "dtype": 32}


# A cell that errored before the engine saw it (its scenario vanished from the checkout, its job
# failed for good) may leave these empty.
UNKNOWN_WHEN_ERRORED = ("operator", "framework", "mode")


def status_attribute(status: str) -> str:
    """The Python name of a status, where one is needed (an enum member, a model field).

    ``pass`` is a keyword, so it becomes ``pass_``.
    """
    return f"{status}_" if keyword.iskeyword(status) else status


def stored_values(field: str) -> tuple[str, ...]:
    """The values a stored cell may hold in a vocabulary field.

    They make the database's check constraints and the API schema's enumerations. An errored cell may
    leave some of them empty.
    """
    values = VOCABULARIES[field]
    return (*values, "") if field in UNKNOWN_WHEN_ERRORED else values


class InvalidCell(ValueError):
    """A cell the engine could never produce: a missing key field or a value outside a vocabulary."""


@dataclasses.dataclass
class Cell:
    scenario: str
    operator: str
    framework: str
    backend: str
    mode: str
    device: str
    dtype: str
    status: Status
    max_abs_err: float | None = None
    max_rel_err: float | None = None
    atol: float | None = None
    rtol: float | None = None
    time_ms: float | None = None
    first_call_ms: float | None = None
    peak_memory_bytes: int | None = None
    message: str = ""
    # Python warnings the cell's computation raised (torch, jax, the scenario's own), one per line:
    # kept with the cell instead of printed where they would flood a terminal or a worker's log.
    warnings: str = ""
    # How the reference was made ("finite differences, full"; "finite differences, 6 probes";
    # "analytic") and the largest error estimate it gave (None: analytic, or none was computed).
    reference: str = ""
    reference_error: float | None = None
    # The arithmetic the cell ran with beyond its dtype, as the frameworks reported it while it ran:
    # torch's TF32 switches and JAX's default matmul precision ("torch tf32 matmul=off cudnn=on").
    precision: str = ""
    # A nondeterminism check (repeats > 1): the largest difference between repeated results, 0.0
    # where they were bitwise identical; None where the cell was not repeated.
    repeat_spread: float | None = None
    # What the cell's scenario cost before any backend ran, the same on each of its cells: its
    # reference (None: it needed none, or it was shared with another scenario of the same function
    # already computed), and the import of its module (None: the built-in library, or in-process).
    reference_ms: float | None = None
    import_ms: float | None = None
    # The whole text of the exception an error cell's computation raised (every line, bounded to
    # 4 KB): the message keeps its first line and where it was raised; this keeps the rest.
    detail: str = ""

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe: NaN and infinite errors become None with the message saying why."""
        out = dataclasses.asdict(self)
        for key, value in out.items():
            if isinstance(value, float) and not math.isfinite(value):
                out[key] = None
        return out

    @property
    def key(self) -> tuple[str, str, str, str]:
        return (self.scenario, self.backend, self.device, self.dtype)


FIELDS: tuple[dataclasses.Field, ...] = dataclasses.fields(Cell)
FIELD_NAMES = tuple(field.name for field in FIELDS)
FLOAT_FIELDS = tuple(field.name for field in FIELDS if field.type == "float | None")
INT_FIELDS = tuple(field.name for field in FIELDS if field.type == "int | None")
# Free text, empty when there is nothing to say (the store keeps them as unbounded text).
TEXT_FIELDS = ("message", "warnings", "reference", "precision", "detail")


def validate_cell(fields: Mapping[str, Any]) -> None:
    """Refuse, with the field and the allowed values, a cell the engine could never produce."""
    scenario = fields.get("scenario")
    missing = [name for name in (*KEY_FIELDS, "status") if not fields.get(name)]
    if missing:
        raise InvalidCell(f"cell {scenario!r} is missing {', '.join(missing)}")
    for name, allowed in VOCABULARIES.items():
        value = fields.get(name)
        if not value and name in UNKNOWN_WHEN_ERRORED and fields["status"] == Status.ERROR:
            continue
        if value not in allowed:
            raise InvalidCell(f"cell {scenario!r}: {name} {value!r} is not one of {', '.join(allowed)}")
    for name, limit in KEY_LENGTHS.items():
        value = fields[name]
        if not isinstance(value, str) or len(value) > limit:
            raise InvalidCell(f"cell {scenario!r}: {name} must be a string of at most {limit} characters")
