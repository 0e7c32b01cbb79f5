"""``gradci check --base``: re-run only the cells a change can affect, carry the rest from a base check.

The base is the JSON a previous ``gradci check --format json`` wrote: each cell there carries its
dependency record (``gradci.scenarios.affected``). Cells whose inputs all digest the same now are
carried with their provenance; the others, and every cell the base lacks, run. ``--all`` runs
everything whatever the base.
"""
from __future__ import annotations

import json
import subprocess
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from gradci.scenarios.affected.carry import (
    CARRIED_KEY,
    ENVIRONMENT_KEY,
    CarryPlan,
    CommitInputs,
    Group,
    carry_planned,
    plan_carry,
)
from gradci.scenarios.affected.environment import Environment, environment
from gradci.scenarios.affected.recording import DEPENDS_KEY
from gradci.scenarios.contract.devices import CPU
from gradci.worker.runner import CellSpec

CellKey = tuple[str, str, str, str]


class BaseError(Exception):
    """The base given to --base cannot be read as a gradci check's cells."""


def read_base(path: str) -> list[dict[str, Any]]:
    """The cells of a previous ``gradci check --format json``."""
    try:
        cells = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise BaseError(f"--base {path}: cannot read it as JSON ({exc})") from exc
    if not isinstance(cells, list) or not all(isinstance(c, dict) and "scenario" in c for c in cells):
        raise BaseError(f"--base {path}: not the cells of a `gradci check --format json` (a list of cells)")
    if cells and not any(DEPENDS_KEY in cell for cell in cells):
        raise BaseError(f"--base {path}: its cells have no dependency records; write the base with "
                        "`gradci check --repo … --format json` of this version of gradci (not with --no-rules)")
    return cells


def check_environment(root: str | None, options: Mapping[str, Any], device: str) -> Environment:
    """The environment a local check's cells on ``device`` are computed in."""
    return environment(root, options, {"device": device})


class AffectedRecords:
    """Each cell's dependency record and provenance, beside its verdict (as ``PowerRecords`` does for power)."""

    def __init__(self, root: str | None, options: Mapping[str, Any]) -> None:
        self.root, self.options = root, dict(options)
        self.sha = sha_of(root)  # where fresh cells are computed: a later check carries them from here
        self.records: dict[CellKey, dict[str, Any]] = {}
        self._environments: dict[str, Environment] = {}
        self._lock = threading.Lock()  # runners answer from their own threads (-j)

    def environment(self, device: str) -> Environment:
        """The environment of this check's cells on ``device``: read once (its files do not change meanwhile)."""
        if device not in self._environments:
            self._environments[device] = check_environment(self.root, self.options, device)
        return self._environments[device]

    def take(self, cells: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Keep the records of ``cells`` (a runner's answer, or carried cells), stamped with the environment."""
        with self._lock:
            for cell in cells:
                kept = {name: cell[name] for name in (DEPENDS_KEY, CARRIED_KEY) if name in cell}
                if self.root is None and not kept:  # the built-in library: gradci's source is in the environment
                    kept[DEPENDS_KEY] = {"scenario": cell.get("fingerprint")}
                if DEPENDS_KEY in kept and CARRIED_KEY not in kept:
                    kept[DEPENDS_KEY] = {**kept[DEPENDS_KEY], "sha": self.sha,
                                         ENVIRONMENT_KEY: self.environment(cell["device"])}
                if kept:
                    self.records[_key(cell)] = kept
        return [{name: value for name, value in cell.items() if name not in (DEPENDS_KEY, CARRIED_KEY)}
                for cell in cells]

    def json_cells(self, cells: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """``cells`` (``Cell.to_dict``), each with its records where it has them."""
        return [{**cell, **self.records.get(_key(cell), {})} for cell in cells]

    def carried_count(self) -> int:
        return sum(1 for record in self.records.values() if CARRIED_KEY in record)


def split(base: list[dict[str, Any]], planned: list[list[CellSpec]], root: str | None,
          environment_for: Callable[[str], Environment],
          base_name: str) -> tuple[list[list[CellSpec]], list[dict[str, Any]], CarryPlan]:
    """(the specs still to run, the base's carried cells, the decision) for ``planned``.

    ``environment_for(device)``: the environment the cells would now be computed in there. Which groups
    (one scenario, backend and device) are carried is the engine's ``carry_planned``, as for the service.
    """
    fingerprints = {specs[0].scenario: specs[0].fingerprint for specs in planned if specs}
    shas = {cell[DEPENDS_KEY].get("sha") for cell in base if isinstance(cell.get(DEPENDS_KEY), dict)}
    provenance = {"run": None, "sha": shas.pop() if len(shas) == 1 else None, "base": base_name}
    plan = plan_carry(base, fingerprints, CommitInputs(root), environment_for, provenance)
    chunks = [_groups(specs) for specs in planned]
    dtypes: dict[Group, list[str]] = {}
    for groups in chunks:
        for group, members in groups.items():
            dtypes.setdefault(group, []).extend(spec.dtype for spec in members)
    decided = carry_planned(plan, dtypes)
    to_run = [[spec for group, members in groups.items() if group not in decided.taken for spec in members]
              for groups in chunks]
    taken = [cell for cells in decided.taken.values() for cell in cells]
    return to_run, taken, plan


def _groups(specs: list[CellSpec]) -> dict[Group, list[CellSpec]]:
    """``specs`` by group (scenario, backend, device), in the order they come."""
    groups: dict[Group, list[CellSpec]] = {}
    for spec in specs:
        groups.setdefault((spec.scenario, spec.backend, spec.device), []).append(spec)
    return groups


def _key(cell: Mapping[str, Any]) -> CellKey:
    return (str(cell["scenario"]), str(cell["backend"]), str(cell.get("device", CPU)), str(cell["dtype"]))


def sha_of(root: str | None) -> str | None:
    """The commit checked out at ``root`` (None: not a git checkout, or the built-in library)."""
    if root is None:
        return None
    found = subprocess.run(["git", "-C", root, "rev-parse", "HEAD"], capture_output=True, text=True)
    return found.stdout.strip() or None if found.returncode == 0 else None
