"""Each cell's dependency record on its way to the database, and the environment a cell is computed in.

The runner adds the record of what a repository's cell read (``gradci.scenarios.affected.recording``);
the worker, not the sandboxed runner, stamps what the runner cannot be trusted to say: the environment
(software, the checkout's configuration and the check's options, the device) and the commit. A cell
of the built-in library has no tracer: its record is its scenario's fingerprint (gradci's own source
is in the environment). The record is taken off the cell, stored once by its digest
(``gradci.services.db.dependencies``) and the cell names it, as ``gradci check --format json``
writes the same record beside the cell (``gradci.cli.affected.AffectedRecords``).

``environment_for`` gives plan_run the same environment for the device a job will run on: read from
the workers online for it (their heartbeat's device record), so a carried cell's device is the one
a re-run would get.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from sqlalchemy.orm import Session

from gradci.scenarios.affected.carry import CARRIED_KEY, ENVIRONMENT_KEY
from gradci.scenarios.affected.environment import Environment, environment
from gradci.scenarios.affected.recording import DEPENDS_KEY
from gradci.scenarios.contract.devices import CPU
from gradci.services.db.dependencies import record_digest, store_records
from gradci.services.db.models import Worker
from gradci.services.db.results import PROVENANCE_FIELDS

# What identifies a device's results: its kind and model, compute capability, driver and CUDA, and the
# frameworks installed beside it. Not what changes from one start to the next (free memory, the
# physical GPU it is pinned to, its index) nor the host's size (cores, total memory).
IDENTITY_FIELDS = ("kind", "name", "capability", "driver", "cuda", "frameworks")
NO_WORKER = {"worker": "none online for this device"}
MIXED = {"workers": "its workers differ (model, driver or versions)"}


def device_identity(record: Mapping[str, Any] | None) -> dict[str, Any]:
    """The stable identifying fields of a worker's device record (``WorkerContext.device_record``)."""
    return {name: record[name] for name in IDENTITY_FIELDS if record and record.get(name) is not None}


def serves(worker_device: str, cell_device: str) -> bool:
    """Whether a worker of ``worker_device`` may run a job of cells labelled ``cell_device``."""
    return worker_device == cell_device or (cell_device != CPU and worker_device.startswith(cell_device + ":"))


def environment_for(root: str | None, options: Mapping[str, Any],
                    workers: Iterable[Worker]) -> Callable[[str], Environment]:
    """The environment a cell on a device would now be computed in, given the workers online.

    No worker online for the device, or workers that differ, give an environment no record has: its
    cells re-run (when in doubt, run).
    """
    identities: dict[str, list[dict[str, Any]]] = {}
    for worker in workers:
        identities.setdefault(worker.device, []).append(device_identity((worker.versions or {}).get("device")))
    found: dict[str, Environment] = {}

    def of(device: str) -> Environment:
        if device not in found:
            seen = [identity for name, ids in identities.items() if serves(name, device) for identity in ids]
            distinct = {record_digest(identity): identity for identity in seen}
            record = next(iter(distinct.values())) if len(distinct) == 1 else MIXED if distinct else NO_WORKER
            found[device] = environment(root, options, record)
        return found[device]

    return of


class DependencyBuffer:
    """The records of a job's buffered cells, until the transaction that stores them commits."""

    def __init__(self, root: str | None, sha: str | None, options: Mapping[str, Any],
                 device_record: Mapping[str, Any]) -> None:
        self.root, self.sha = root, sha
        # Computed once per job: the checkout and the installation do not change while it runs.
        self.environment = environment(root, options, device_identity(device_record))
        self.pending: dict[str, dict[str, Any]] = {}
        self.stored: set[str] = set()

    def take(self, cell: dict[str, Any]) -> dict[str, Any]:
        """The cell without its record, naming it by digest (``depends_digest``) instead."""
        record = cell.pop(DEPENDS_KEY, None)
        for name in (CARRIED_KEY, *PROVENANCE_FIELDS):  # only plan_run carries: a runner's word on it is dropped
            cell.pop(name, None)
        if not isinstance(record, Mapping):
            if self.root is not None:
                return cell  # a repository's cell without a record (an error cell): never carried
            record = {"scenario": cell.get("fingerprint")}
        stamped = {**record, ENVIRONMENT_KEY: self.environment, "sha": self.sha}
        digest = record_digest(stamped)
        if digest not in self.stored:
            self.pending[digest] = stamped
        cell["depends_digest"] = digest
        return cell

    def store(self, session: Session) -> None:
        if self.pending:
            store_records(session, self.pending)

    def committed(self) -> None:
        self.stored.update(self.pending)
        self.pending = {}
