"""Which of a base run's cells a new commit can carry unchanged, and why each other one must re-run.

A base cell is carried when everything its dependency record names digests the same at the new commit:
the scenario's fingerprint, each project file over the functions the cell entered, each data file and
folder listing it read, and the environment (software, configuration, device). Cells re-run by group —
one scenario on one backend and device, all its dtypes — since a group's cells are judged together (the
precisions' agreement, the modes' agreement). When in doubt it re-runs: a cell without a record, an
``error`` (a timeout is one), a file that cannot be read or lies outside the checkout.

A carried cell keeps its verdict, its fields and its record, and gains ``CARRIED_KEY``: where it was
computed (``{"run": …, "sha": …, "reason": "inputs unchanged"}``), which reports show beside it.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from gradci.scenarios.affected.environment import Environment, differences
from gradci.scenarios.affected.recording import DEPENDS_KEY, MISSING, file_digest, inside, listing_digest
from gradci.scenarios.affected.source_digest import bytes_digest, python_digest

CARRIED_KEY = "carried"
ENVIRONMENT_KEY = "environment"  # inside DEPENDS_KEY: the environment the cell was computed in
SCENARIO_KEY = "scenario"  # inside DEPENDS_KEY: the scenario's fingerprint (what its function reads)
UNCHANGED = "inputs unchanged"
Group = tuple[str, str, str]  # (scenario, backend, device)


def group_of(cell: Mapping[str, Any]) -> Group:
    return (str(cell["scenario"]), str(cell["backend"]), str(cell["device"]))


@dataclasses.dataclass
class CarryPlan:
    """The base cells carried over, and the groups to re-run with the first reason found for each."""

    carried: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    rerun: dict[Group, str] = dataclasses.field(default_factory=dict)

    @property
    def carried_groups(self) -> set[Group]:
        return {group_of(cell) for cell in self.carried}


class CommitInputs:
    """The new commit's side: digests of its files, computed once each."""

    def __init__(self, root: str | Path | None) -> None:
        self.root = Path(root).resolve() if root is not None else None
        self._python: dict[tuple[str, frozenset[str]], str] = {}
        self._bytes: dict[str, bytes | None] = {}

    def changed(self, depends: Mapping[str, Any], environment: Environment) -> str | None:
        """Why a cell with this record must re-run at this commit in ``environment`` (None: it need not)."""
        said = differences(depends.get(ENVIRONMENT_KEY) or {}, environment)
        if ENVIRONMENT_KEY not in depends:
            return "no environment in its record"
        if said:
            return ", ".join(said[:3]) + (" …" if len(said) > 3 else "")
        for file, entry in sorted((depends.get("files") or {}).items()):
            if self._code_digest(str(file), entry) != entry.get("digest"):
                return f"{file} changed"
        if self.root is None:
            return "no checkout to compare its files with" if depends.get("files") else None
        root = self.root
        for file, digest in sorted((depends.get("data") or {}).items()):
            if file_digest(root, str(file)) != digest:
                return f"data file {file} changed"
        for folder, digest in sorted((depends.get("listings") or {}).items()):
            if listing_digest(root, str(folder)) != digest:
                return f"the files in {folder}/ changed"
        for folder, digest in sorted((depends.get("modules") or {}).items()):
            if listing_digest(root, str(folder), importable=True) != digest:
                return f"the modules in {folder}/ changed (a new one could shadow an import)"
        return None

    def _code_digest(self, file: str, entry: Any) -> str | None:
        if not isinstance(entry, Mapping) or self.root is None:
            return None
        source = self._read(file)
        if source is None:
            return MISSING
        if not file.endswith(".py"):
            return bytes_digest(source)
        kept = frozenset(str(name) for name in entry.get("kept") or ())
        if (file, kept) not in self._python:
            self._python[(file, kept)] = python_digest(source, kept)
        return self._python[(file, kept)]

    def _read(self, file: str) -> bytes | None:
        if file not in self._bytes:
            path = inside(self.root, file) if self.root is not None else None
            self._bytes[file] = path.read_bytes() if path is not None and path.is_file() else None
        return self._bytes[file]


def plan_carry(base_cells: Iterable[Mapping[str, Any]], fingerprints: Mapping[str, str | None],
               inputs: CommitInputs, environment_for: Callable[[str], Environment],
               provenance: Mapping[str, Any]) -> CarryPlan:
    """Split the base run's cells into those carried (with ``provenance``) and the groups to re-run.

    ``fingerprints``: the new commit's scenarios by name (a scenario not there is not carried);
    ``environment_for(device)``: the environment a cell on that device would now be computed in.
    """
    plan = CarryPlan()
    candidates: dict[Group, list[Mapping[str, Any]]] = {}
    for cell in base_cells:
        group = group_of(cell)
        if group in plan.rerun:
            continue
        why = _why_rerun(cell, fingerprints, inputs, environment_for)
        if why is None:
            candidates.setdefault(group, []).append(cell)
        else:
            plan.rerun[group] = why
            candidates.pop(group, None)
    for group, cells in candidates.items():
        if group not in plan.rerun:
            # A cell carried before keeps where it was computed.
            plan.carried += [{**cell, CARRIED_KEY: cell.get(CARRIED_KEY) or {**provenance, "reason": UNCHANGED}}
                             for cell in cells]
    return plan


@dataclasses.dataclass
class PlannedCarry:
    """The planned groups a base carries whole, with their cells, and why each other planned group re-runs."""

    taken: dict[Group, list[dict[str, Any]]] = dataclasses.field(default_factory=dict)
    rerun: dict[Group, str] = dataclasses.field(default_factory=dict)


def carry_planned(plan: CarryPlan, planned: Mapping[Group, Iterable[str]]) -> PlannedCarry:
    """Which of the ``planned`` groups (each with its dtypes) ``plan`` carries, in the order planned.

    A group is carried only when the base carries a cell for every dtype planned of it: a dtype the base
    lacks, or any cell of the group that ``plan_carry`` re-runs (an error, a timeout being one; a changed
    input), and the whole group runs, since its cells are judged together.
    """
    carried = {(*group_of(cell), str(cell["dtype"])): cell for cell in plan.carried}
    decided = PlannedCarry()
    for group, dtypes in planned.items():
        keys = [(*group, str(dtype)) for dtype in dtypes]
        if all(key in carried for key in keys):
            decided.taken[group] = [carried[key] for key in keys]
        else:
            lacking = "the base run lacks some of its dtypes" if any(key in carried for key in keys) else None
            decided.rerun[group] = plan.rerun.get(group) or lacking or "not in the base run"
    return decided


def recorded_fingerprints(base_cells: Iterable[Mapping[str, Any]]) -> dict[str, str | None]:
    """The scenarios' fingerprints as the base cells' records have them.

    Where every file, data file and listing a base cell's record names digests the same and the
    environment is the same, listing the scenarios again would find these fingerprints: they are
    computed from the objects that code and data make. So ``plan_carry`` with them decides, without
    importing anything, whether a commit changed nothing any cell depends on (a plan with no re-run);
    any re-run means the scenarios must be listed to know what else changed.
    """
    found: dict[str, str | None] = {}
    for cell in base_cells:
        depends = cell.get(DEPENDS_KEY)
        fingerprint = depends.get(SCENARIO_KEY) if isinstance(depends, Mapping) else None
        name = str(cell["scenario"])
        found[name] = fingerprint if found.get(name, fingerprint) == fingerprint else None
    return found


def _why_rerun(cell: Mapping[str, Any], fingerprints: Mapping[str, str | None], inputs: CommitInputs,
               environment_for: Callable[[str], Environment]) -> str | None:
    name = str(cell["scenario"])
    if cell.get("status") == "error":
        return "its result was an error"
    if name not in fingerprints:
        return "the scenario is gone"
    depends = cell.get(DEPENDS_KEY)
    if not isinstance(depends, Mapping):
        return "no dependency record"
    if not fingerprints[name] or fingerprints[name] != depends.get(SCENARIO_KEY):
        return "the scenario changed"
    return inputs.changed(depends, environment_for(str(cell["device"])))
