"""Measure a scenario's detection power: re-run its cells with errors planted in the rules they reached.

After a scenario's cells are checked with rule coverage, each derivative method of a rule that some
passing cell ran (its ``backward``, ``jvp``, ``bwd``) gets each perturbation of ``planting`` in turn,
and only the cells that ran it are checked again, the reference taken from the cache the first check
filled (a plant never touches a reference). One probe run first, with the method wrapped but nothing
changed, learns how many outputs the method returns and their shapes. ``scale`` walks δ down the
ladder 1e-1 … 1e-8 and stops, per cell, at the first δ the cell misses: a cell that misses 1e-3 is
taken to miss 1e-4 too (its error only shrinks), which saves most of the runs. A rung where the cell
raises with the plant stops its ladder too, as neither a miss nor a catch (``stopped_delta``).

The cells returned by the first check are the verdict; nothing here changes them. A cell that did not
pass without a plant is not measured: a plant cannot show what a failing check would catch.
"""
from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from gradci.scenarios.contract.cell import Cell, Status
from gradci.scenarios.power.planting import PLANTABLE, PROBE, Plant, Planted, planted
from gradci.scenarios.rules.discovery import Rule, rule_objects
from gradci.scenarios.rules.power import (
    CAUGHT,
    DROP,
    ERROR,
    LADDER,
    MISSED,
    NO_OP,
    NOT_PLANTED,
    SCALE,
    SIGN,
    TRANSPOSE,
    CellPower,
    PlantResult,
)
from gradci.scenarios.rules.records import CellRules
from gradci.scenarios.rules.tracing import tracing

if TYPE_CHECKING:
    from gradci.scenarios.authoring.scenario import Scenario
    from gradci.scenarios.backends import Backend
    from gradci.scenarios.reference.answer import ReferenceCache
    from gradci.scenarios.rules.tracing import RuleTracer

CellKey = tuple[str, str, str, str]


def measure_power(scenario: Scenario, cells: Sequence[Cell], records: Mapping[CellKey, CellRules], rules: list[Rule],
                  root: str | Path, backends: Sequence[Backend], references: ReferenceCache,
                  peers: Sequence[Backend] = ()) -> dict[CellKey, CellPower]:
    """Each cell's power, for the cells that reached some rule (by their rule-coverage ``records``).

    ``backends``: those the cells were checked with (by name); ``references``: the cache their check
    used, which holds the scenario's reference; ``peers``: as for ``check_scenario``.
    """
    # Only the cells that ran a method a plant goes into: one that ran a rule's forward alone (a forward-mode
    # cell of a rule with no jvp) has nothing to measure, whatever its status.
    plantable = {rule.id: set(PLANTABLE.get(rule.kind, ())) for rule in rules}
    def ran_plantable(key: CellKey) -> bool:
        record = records.get(key)
        return record is not None and any(plantable.get(rule_id, set()) & set(methods)
                                          for rule_id, methods in record.rules.items())

    powers = {cell.key: CellPower() for cell in cells if ran_plantable(cell.key)}
    measurable = []
    for cell in cells:
        if cell.key in powers and cell.status != Status.PASS:
            powers[cell.key].not_measured = (f"the cell is {cell.status} without a plant: only a passing cell "
                                             "shows what its check would catch")
        elif cell.key in powers:
            measurable.append(cell)
    if not measurable:
        return powers
    runs = _Runs(scenario, root, {backend.name: backend for backend in backends}, references, peers)
    objects = rule_objects(root)
    for rule in rules:
        for method in PLANTABLE.get(rule.kind, ()):
            reaching = [cell for cell in measurable if method in records[cell.key].rules.get(rule.id, ())]
            if reaching:
                for cell, result in _measure_method(runs, rule, method, objects.get(rule.id, []), reaching):
                    powers[cell.key].plants.append(result)
    return powers


class _Runs:
    """Re-runs of some of a scenario's cells under a plant."""

    def __init__(self, scenario: Scenario, root: str | Path, backends: dict[str, Backend],
                 references: ReferenceCache, peers: Sequence[Backend]) -> None:
        self.scenario, self.root, self.backends = scenario, root, backends
        self.references, self.peers = references, peers
        self.count = 0

    def run(self, rule: Rule, objects: list[Any], method: str, plant: Plant,
            cells: Sequence[Cell]) -> tuple[Planted, dict[CellKey, Cell]]:
        from gradci.scenarios.check import check_scenario

        self.count += 1
        backends = [self.backends[name] for name in dict.fromkeys(cell.backend for cell in cells)]
        devices = list(dict.fromkeys(cell.device for cell in cells))
        dtypes = list(dict.fromkeys(cell.dtype for cell in cells))
        # The plant stands in for the rule tracer: the engine's hook tells it which cell is running.
        with planted(objects, rule.kind, method, plant, self.root) as state, \
                tracing(cast("RuleTracer", state)), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the cells' warnings were reported by their own check
            again = check_scenario(self.scenario, backends, devices, dtypes, self.references, peers=self.peers,
                                   repeats=1)
        return state, {cell.key: cell for cell in again}


def _measure_method(runs: _Runs, rule: Rule, method: str, objects: list[Any],
                    reaching: list[Cell]) -> list[tuple[Cell, PlantResult]]:
    def result(cell: Cell, kind: str, outcome: str, output: int = 0, outputs: int = 0, **more: Any) -> PlantResult:
        return PlantResult(rule.id, method, output, outputs, kind, outcome, **more)

    if not objects:
        note = f"{rule.name} is not found among the loaded objects to plant in"
        return [(cell, result(cell, SCALE, NOT_PLANTED, note=note)) for cell in reaching]
    probe, _ = runs.run(rule, objects, method, Plant(PROBE), reaching)
    unreached = [cell for cell in reaching if not probe.applied[cell.key]]
    note = (f"could not plant: the cell did not run the planted `{method}` (a class made anew on each call, or a "
            "program compiled where the plant cannot reach)")
    found = [(cell, result(cell, SCALE, NOT_PLANTED, note=note)) for cell in unreached]
    cells = [cell for cell in reaching if probe.applied[cell.key]]
    outputs = probe.outputs
    plants: list[tuple[int, str]] = []
    floating = [index for index, shape in enumerate(outputs) if shape.floating]
    for index in floating:
        plants += [(index, SCALE), (index, SIGN)]
        if len(floating) > 1:
            plants.append((index, DROP))
        if outputs[index].square:
            plants.append((index, TRANSPOSE))
    for index, kind in plants:
        if kind == SCALE:
            found += _ladder(runs, rule, method, objects, cells, index, len(outputs))
            continue
        state, after = runs.run(rule, objects, method, Plant(kind, index), cells)
        for cell in cells:
            outcome, note = _outcome(state, cell.key, after.get(cell.key))
            found.append((cell, result(cell, kind, outcome, index, len(outputs), note=note)))
    return found


def _ladder(runs: _Runs, rule: Rule, method: str, objects: list[Any], cells: list[Cell], index: int,
            outputs: int) -> list[tuple[Cell, PlantResult]]:
    """``scale`` down the ladder, each cell until the first δ it misses."""
    smallest: dict[CellKey, float] = {}
    first_missed: dict[CellKey, float] = {}
    # A rung where the cell raised (or did not run the plant): the ladder stops there, neither a miss nor a
    # catch, and says so; what a smaller δ would do is not known.
    stopped: dict[CellKey, tuple[float, str]] = {}
    at_top: dict[CellKey, tuple[str, str]] = {}  # the outcome at 1e-1 of a cell that did not catch it
    active = list(cells)
    for delta in LADDER:
        state, after = runs.run(rule, objects, method, Plant(SCALE, index, delta), active)
        still = []
        for cell in active:
            outcome, note = _outcome(state, cell.key, after.get(cell.key))
            if outcome == CAUGHT:
                smallest[cell.key] = delta
                still.append(cell)
            elif cell.key not in smallest:
                at_top[cell.key] = (outcome, note)
            elif outcome in (MISSED, NO_OP):  # no-op: 1 + δ rounds to 1 in the dtype, which is a miss too
                first_missed[cell.key] = delta
            else:
                stopped[cell.key] = (delta, f"at δ = {delta:g}: {note}")
        active = still
        if not active:
            break
    found = []
    for cell in cells:
        outcome, note = (CAUGHT, "") if cell.key in smallest else at_top[cell.key]
        stop_delta, note = stopped.get(cell.key, (None, note))
        found.append((cell, PlantResult(rule.id, method, index, outputs, SCALE, outcome,
                                        smallest_delta=smallest.get(cell.key),
                                        missed_delta=first_missed.get(cell.key), note=note,
                                        stopped_delta=stop_delta)))
    return found


def _outcome(state: Planted, key: CellKey, cell: Cell | None) -> tuple[str, str]:
    if cell is None or not state.applied[key]:
        return NOT_PLANTED, "it did not run the planted method this time"
    if cell.status == Status.ERROR:
        return ERROR, f"the planted rule raised: {cell.message}"
    if cell.status == Status.FAIL:
        return CAUGHT, ""
    if state.unchanged[key] and not state.changed[key]:
        return NO_OP, "the plant changed no value (an all-zero output, a symmetric matrix)"
    return MISSED, ""

