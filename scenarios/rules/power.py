"""Detection power: which planted errors in a rule each cell caught, per cell and per rule, as plain JSON.

A cell's record travels beside its fields under ``POWER_KEY`` (never inside its verdict), as
``CellPower.to_dict()``::

    {"plants": [{"rule": "pkg/ops.py::Cube", "method": "backward", "output": 0, "outputs": 1,
                 "kind": "scale", "outcome": "caught", "smallest_delta": 1e-06, "missed_delta": 1e-07,
                 "note": ""}, ...],
     "smallest_delta": 1e-06,          # the smallest δ of any scaled output it caught (null: none)
     "missed": ["Cube.backward's first output, sign of its largest entry flipped", ...],
     "raised": ["Cube: `backward`'s output, …: at δ = 1e-05: the planted rule raised: …", ...],
     "not_measured": null}             # or why not: "the cell is fail without a plant"

``kind`` is ``scale`` (the output's largest-magnitude entry times 1 + δ, δ down the ``LADDER``
1e-1 … 1e-8 while the cell still catches it), ``sign`` (that entry's sign flipped), ``drop`` (the
output zeroed: a dropped term; only where the method returns several) or ``transpose`` (a square
matrix output transposed). ``outcome`` is ``caught`` (the cell fails with the plant), ``missed``
(it passes), ``no-op`` (the plant changed no value it could see: an all-zero output, a symmetric
matrix), ``not planted`` (the cell did not run the planted method: ``note`` says why) or ``error``
(the cell raised with the plant: ``note`` has its message, "the planted rule raised: …"; counted
neither way). For ``scale``, ``smallest_delta`` is the smallest δ caught, ``missed_delta`` the first
δ missed (null: caught down to 1e-8, or missed at 1e-1) and ``stopped_delta`` the δ at which the cell
raised after catching the larger ones (its ladder stopped there; ``note`` says so; null: it did not).

Over a check, ``summarize_power`` gives one ``RulePower`` per planted rule (``to_dict`` likewise
plain): per plant, the cells that reached it and those that caught it, the rule's weakest perturbation
caught, and a line for each perturbation no cell catches ("a 1 % error in `bwd`'s second output is
caught by no cell: only float32 cells reach it (rtol up to 1e-04)"). None of it changes a verdict.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

from gradci.scenarios.contract.cell import Cell
from gradci.scenarios.contract.wording import count_of, plural
from gradci.scenarios.rules.discovery import Rule

SCALE, SIGN, DROP, TRANSPOSE = "scale", "sign", "drop", "transpose"  # the plants
POWER_KEY = "power"  # the key under which a runner's cell record carries it
LADDER = tuple(10.0 ** -k for k in range(1, 9))  # 1e-1 … 1e-8
CAUGHT, MISSED, NO_OP, NOT_PLANTED, ERROR = "caught", "missed", "no-op", "not planted", "error"
# A scaled output no cell catches at this δ is a finding of its own: a 1 % error should not pass.
NOTABLE_DELTA = 1e-2
ORDINALS = ("first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth", "ninth", "tenth")
WHAT = {SCALE: "largest entry scaled by 1 + δ", SIGN: "sign of its largest entry flipped",
        DROP: "zeroed (a dropped term)", TRANSPOSE: "transposed"}
SHORT = {SCALE: "scaled by 1.1", SIGN: "a sign flipped", DROP: "zeroed", TRANSPOSE: "transposed"}


def output_name(method: str, output: int, outputs: int) -> str:
    """"`bwd`'s second output", or "`backward`'s output" where it returns one."""
    if outputs <= 1:
        return f"`{method}`'s output"
    if output >= len(ORDINALS):
        return f"`{method}`'s output #{output + 1}"
    return f"`{method}`'s {ORDINALS[output]} output"


def percent(delta: float) -> str:
    return f"{delta * 100:g} %"


def _reaching(count: int) -> str:
    """"1 cell that reaches it", "3 cells that reach it"."""
    return count_of(count, "cell that reaches it", "cells that reach it")


@dataclasses.dataclass(frozen=True)
class PlantResult:
    """One perturbation of one output of one rule's method, as one cell saw it."""

    rule: str
    method: str
    output: int
    outputs: int
    kind: str
    outcome: str
    smallest_delta: float | None = None
    missed_delta: float | None = None
    note: str = ""
    # ``scale`` only: the δ at which the cell raised with the plant after catching the larger ones (the
    # ladder stopped there: neither a miss nor a catch; ``note`` has the error).
    stopped_delta: float | None = None

    @property
    def target(self) -> tuple[str, str, int, str]:
        return self.rule, self.method, self.output, self.kind

    def describe(self) -> str:
        """"Cube: `backward`'s output, zeroed (a dropped term)"."""
        rule_name = self.rule.rsplit("::", 1)[-1]
        return f"{rule_name}: {output_name(self.method, self.output, self.outputs)}, {WHAT[self.kind]}"

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PlantResult:
        return cls(**{field.name: data.get(field.name, field.default) for field in dataclasses.fields(cls)})


@dataclasses.dataclass
class CellPower:
    """A cell's detection power: each plant's outcome, or why it was not measured."""

    plants: list[PlantResult] = dataclasses.field(default_factory=list)
    not_measured: str | None = None

    @property
    def smallest_delta(self) -> float | None:
        caught = [p.smallest_delta for p in self.plants if p.kind == SCALE and p.smallest_delta is not None]
        return min(caught, default=None)

    def missed(self) -> list[str]:
        """The plants it missed outright (``scale``: even at δ = 1e-1), one line per output.

        "Mul: `backward`'s second output (scaled by 1.1, a sign flipped, zeroed)".
        """
        by_output: dict[tuple[str, str, int, int], list[str]] = {}
        for p in self.plants:
            if p.outcome == MISSED:
                by_output.setdefault((p.rule, p.method, p.output, p.outputs), []).append(SHORT[p.kind])
        return [f"{rule.rsplit('::', 1)[-1]}: {output_name(method, output, outputs)} ({', '.join(kinds)})"
                for (rule, method, output, outputs), kinds in by_output.items()]

    def raised(self) -> list[str]:
        """The plants with which the cell raised, as a miss is not: "Mul: `backward`'s output, … (at δ = …)"."""
        return [f"{p.describe()}: {p.note}" for p in self.plants
                if p.outcome == ERROR or p.stopped_delta is not None]

    def to_dict(self) -> dict[str, Any]:
        return {"plants": [p.to_dict() for p in self.plants], "smallest_delta": self.smallest_delta,
                "missed": self.missed(), "raised": self.raised(), "not_measured": self.not_measured}

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> CellPower:
        data = data or {}
        return cls([PlantResult.from_dict(p) for p in data.get("plants") or ()], data.get("not_measured"))


@dataclasses.dataclass(frozen=True)
class Reacher:
    """A cell that ran a planted method, and what it made of one plant."""

    scenario: str
    backend: str
    device: str
    dtype: str
    rtol: float | None
    atol: float | None
    result: PlantResult

    def label(self) -> str:
        return f"{self.scenario} ({self.backend}, {self.device}, {self.dtype})"


@dataclasses.dataclass
class PlantPower:
    """One plant over every cell that reached it."""

    rule: str
    method: str
    output: int
    outputs: int
    kind: str
    cells: list[Reacher]

    @property
    def measured(self) -> list[Reacher]:
        return [c for c in self.cells if c.result.outcome in (CAUGHT, MISSED)]

    @property
    def caught_by(self) -> list[Reacher]:
        return [c for c in self.cells if c.result.outcome == CAUGHT]

    @property
    def smallest_delta(self) -> float | None:
        """For ``scale``: the smallest δ some cell caught."""
        return min((c.result.smallest_delta for c in self.caught_by if c.result.smallest_delta is not None),
                   default=None)

    def finding(self) -> str | None:
        """The line for a perturbation no cell catches; None where some cell does, or none measured it."""
        measured = self.measured
        if not measured:
            return None
        where = output_name(self.method, self.output, self.outputs)
        if self.kind == SCALE:
            smallest = self.smallest_delta
            if smallest is not None and smallest <= NOTABLE_DELTA:
                return None
            cut = [c for c in measured
                   if c.result.stopped_delta is not None and c.result.stopped_delta >= NOTABLE_DELTA]
            if cut:  # their ladder stopped before 1 %: whether they catch it is not known
                deltas = ", ".join(sorted({f"{c.result.stopped_delta:g}" for c in cut}))
                return (f"a {percent(NOTABLE_DELTA)} error in {where} is not known to be caught: the planted rule "
                        f"raised at δ = {deltas} in {len(cut)} of the {_reaching(len(measured))}")
            tried = NOTABLE_DELTA if smallest is not None else LADDER[0]
            caught = f" (the smallest caught: {percent(smallest)})" if smallest is not None else ""
            head = f"a {percent(tried)} error in {where} is caught by no cell{caught}"
        elif self.caught_by:
            return None
        else:
            head = f"{where} {WHAT[self.kind]} is caught by no cell"
        return f"{head}: {self.why(measured)}"

    def why(self, measured: list[Reacher]) -> str:
        dtypes = sorted({c.dtype for c in measured})
        rtol = max((c.rtol for c in measured if c.rtol is not None), default=None)
        tolerance = f" (rtol up to {rtol:.0e})" if rtol is not None else ""
        if self.kind in (DROP, SIGN) or (self.kind == SCALE and self.smallest_delta is None):
            return (f"the {_reaching(len(measured))} ({', '.join(dtypes)}) {plural(len(measured), 'passes', 'pass')} "
                    "with it: no cell compares this output (the gradient of an input no scenario differentiates?)")
        if len(dtypes) == 1 and dtypes[0] != "float64":
            return f"only {dtypes[0]} cells reach it{tolerance}"
        return (f"the {_reaching(len(measured))} ({', '.join(dtypes)}) {plural(len(measured), 'passes', 'pass')} "
                f"with it{tolerance}")

    def to_dict(self) -> dict[str, Any]:
        return {"rule": self.rule, "method": self.method, "output": self.output, "outputs": self.outputs,
                "kind": self.kind, "reached_by": len(self.cells), "measured_by": len(self.measured),
                "caught_by": len(self.caught_by), "smallest_delta": self.smallest_delta, "finding": self.finding()}


@dataclasses.dataclass
class RulePower:
    """A rule's detection power over a check: its plants, its weakest perturbation caught, its findings."""

    rule: Rule
    plants: list[PlantPower]

    def weakest_caught(self) -> str | None:
        """The smallest error some cell caught: "1e-06 in `backward`'s output", or a kind, or None."""
        scaled = [(p.smallest_delta, p) for p in self.plants if p.kind == SCALE and p.smallest_delta is not None]
        if scaled:
            delta, plant = min(scaled, key=lambda pair: pair[0])
            return f"δ = {delta:g} in {output_name(plant.method, plant.output, plant.outputs)}"
        other = next((p for p in self.plants if p.caught_by), None)
        return f"{output_name(other.method, other.output, other.outputs)} {WHAT[other.kind]}" if other else None

    def findings(self) -> list[str]:
        """A line per perturbation no cell catches; one per output where every one of its plants is missed."""
        lines = []
        for (method, output), plants in _by_output(self.plants).items():
            found = [(plant, line) for plant in plants if (line := plant.finding())]
            if len(found) > 1 and len(found) == len(plants) and not any(p.caught_by for p in plants):
                first = plants[0]
                where = output_name(method, output, first.outputs)
                kinds = ", ".join(SHORT[p.kind] for p in plants)
                lines.append(f"{where}, {kinds}: caught by no cell: {first.why(first.measured)}")
            else:
                lines += [line for _, line in found]
        return lines

    def to_dict(self) -> dict[str, Any]:
        return {"rule": self.rule.id, "name": self.rule.name, "kind": self.rule.kind, "file": self.rule.file,
                "weakest_caught": self.weakest_caught(), "findings": self.findings(),
                "plants": [p.to_dict() for p in self.plants]}


def _by_output(plants: list[PlantPower]) -> dict[tuple[str, int], list[PlantPower]]:
    grouped: dict[tuple[str, int], list[PlantPower]] = {}
    for plant in plants:
        grouped.setdefault((plant.method, plant.output), []).append(plant)
    return grouped


def summarize_power(rules: Iterable[Rule], cells: Iterable[tuple[Cell, CellPower]]) -> list[RulePower]:
    """Each planted rule's power over ``cells``, each with its record."""
    plants: dict[tuple[str, str, int, str], PlantPower] = {}
    for cell, power in cells:
        for result in power.plants:
            plant = plants.setdefault(result.target, PlantPower(result.rule, result.method, result.output,
                                                                result.outputs, result.kind, []))
            plant.cells.append(Reacher(cell.scenario, cell.backend, cell.device, cell.dtype, cell.rtol, cell.atol,
                                       result))
    found = []
    for rule in rules:
        own = sorted((p for p in plants.values() if p.rule == rule.id),
                     key=lambda p: (p.method, p.output, list(WHAT).index(p.kind)))
        if own:
            found.append(RulePower(rule, own))
    return found
