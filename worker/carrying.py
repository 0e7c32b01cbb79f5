"""plan_run's carry step: which of the planned cells a base run's results stand for, and why the others re-run.

A run finds its base (``gradci.services.db.dependencies.base_run``: the latest finished default-branch
push of its repository with the same matrix), and the engine (``gradci.scenarios.affected.carry``)
compares each base cell's dependency record with the new checkout: parsing and digesting files here,
in the worker, while no code of the repository runs. A group (scenario, backend, device) is carried
only when the base has every dtype the plan has of it (the engine's ``carry_planned``, which
``gradci check --base`` uses too); and when any group of a scenario re-runs, all
of its groups re-run, since a scenario's cells are judged together across backends and devices (the
modes' agreement, the GPU's agreement with the CPU). When in doubt — an error while deciding, a
device with no worker online, workers that differ — it runs.

A run is full (carries nothing) when asked: the API's ``full`` option, the pull request's
``GRADCI_FULL_RUN_LABEL`` label, a repository matching ``GRADCI_FULL_RUN_REPOS``, or a default-branch
push whose repository's last full default-branch run is older than ``GRADCI_FULL_RUN_EVERY_H``.
"""
from __future__ import annotations

import dataclasses
import fnmatch
import logging
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from gradci.scenarios.affected.carry import CommitInputs, carry_planned, plan_carry, recorded_fingerprints
from gradci.services import planner
from gradci.services.db.dependencies import (
    CarrySummary,
    Group,
    base_cells,
    base_run,
    carried_result,
    copy_catalogs,
    copy_reaches,
)
from gradci.services.db.models import Delivery, Run, RunStatus, Trigger, database_now
from gradci.services.db.results import upsert_results
from gradci.services.db.session import session_scope
from gradci.services.db.workers import online_workers
from gradci.services.github.events import has_label
from gradci.services.settings import Settings
from gradci.worker.affected import environment_for
from gradci.worker.sources import Source

log = logging.getLogger(__name__)

LOOKED_AT = 50  # a repository's latest default-branch runs searched for its last full one
FULL_STATUSES = (RunStatus.passed.value, RunStatus.failed.value)


@dataclasses.dataclass
class Carry:
    """What a run's plan carries: the results rows to store, their groups, the base and the summary."""

    summary: CarrySummary
    rows: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    groups: set[Group] = dataclasses.field(default_factory=set)


def full_reason(session: Session, run: Run, settings: Settings) -> str | None:
    """Why ``run`` must run every cell (None: it may carry)."""
    if (run.options or {}).get("full"):
        return "asked for a full run (full)"
    repository = run.repository
    if repository is not None and settings.full_run_repos:
        names = [repository.url] + ([repository.full_name] if repository.full_name else [])
        if any(fnmatch.fnmatchcase(name, pattern) for name in names for pattern in settings.full_run_repos):
            return "the repository always runs in full (GRADCI_FULL_RUN_REPOS)"
    if run.pr_number is not None and _labelled(session, run, settings.full_run_label):
        return f"the pull request is labelled {settings.full_run_label!r}"
    if repository is not None and run.trigger == Trigger.push.value and run.pr_number is None:
        return _default_branch_due(session, run, settings.full_run_every_h)
    return None


def _labelled(session: Session, run: Run, label: str) -> bool:
    """Whether the webhook that made the run (or the run it re-runs) had the pull request labelled ``label``."""
    ids = [run.id] + ([run.parent_run_id] if run.parent_run_id is not None else [])
    payloads = session.scalars(select(Delivery.payload).where(Delivery.run_id.in_(ids)))
    return any(isinstance(payload, dict) and has_label(payload, label) for payload in payloads)


def _default_branch_due(session: Session, run: Run, every_h: float) -> str | None:
    """Why a default-branch push is due for a full run (None: its repository had one recently)."""
    if every_h <= 0:
        return "every default-branch run is full (GRADCI_FULL_RUN_EVERY_H=0)"
    query = (select(Run).where(Run.repository_id == run.repository_id, Run.id != run.id,
                               Run.trigger == Trigger.push.value, Run.pr_number.is_(None),
                               Run.status.in_(FULL_STATUSES), Run.finished_at.is_not(None))
             .order_by(Run.finished_at.desc()).limit(LOOKED_AT))
    # A run planned before carrying existed (no summary), or that had no base, ran in full.
    last_full = next((earlier for earlier in session.scalars(query) if earlier.carry is None
                      or earlier.carry.get("full") or earlier.carry.get("base_run_id") is None), None)
    if last_full is None or last_full.finished_at is None:
        return "the default branch has no full run yet"
    if database_now(session) - last_full.finished_at > timedelta(hours=every_h):
        return f"the default branch's last full run (run {last_full.id}) is over {every_h:g} h old"
    return None


def decide(settings: Settings, run_id: int, source: Source, the_plan: planner.Plan,
           options: Mapping[str, Any]) -> Carry:
    """What the plan of ``run_id`` carries from its base; never raises (an error means a full run)."""
    try:
        return _decide(settings, run_id, source, the_plan, options)
    except Exception as exc:  # when in doubt, run: a failure to decide must not fail the run
        log.exception("run %s: carrying failed, every cell runs", run_id)
        return Carry(CarrySummary(full=f"carrying failed ({type(exc).__name__}): every cell runs"))


def _decide(settings: Settings, run_id: int, source: Source, the_plan: planner.Plan,
            options: Mapping[str, Any]) -> Carry:
    with session_scope(settings.database_url, readonly=True) as session:
        run = session.get(Run, run_id)
        if run is None:
            return Carry(CarrySummary())
        full = full_reason(session, run, settings)
        if full is not None:
            return Carry(CarrySummary(full=full))
        base = base_run(session, run)
        if base is None:
            return Carry(CarrySummary())
        cells = base_cells(session, base.id)
        workers = online_workers(session, within_s=settings.worker_online_s)
        base_id, base_sha = base.id, base.head_sha
    planned = planned_cells(source, the_plan)
    fingerprints = {info.name: info.fingerprint for info in source.scenarios}
    engine = plan_carry(cells, fingerprints, CommitInputs(source.root), environment_for(source.root, options, workers),
                        {"run": base_id, "sha": base_sha})
    decided = carry_planned(engine, planned)
    taken, rerun = decided.taken, decided.rerun
    # A scenario's groups are judged together: one re-running takes the others with it.
    again = {group[0] for group in rerun}
    for group in [group for group in taken if group[0] in again]:
        del taken[group]
        rerun[group] = "another of the scenario's cells re-runs (its cells are compared with each other)"
    rows = [carried_result(cell) for group_cells in taken.values() for cell in group_cells]
    return Carry(CarrySummary.of(base_id, base_sha, len(rows), rerun), rows, set(taken))


def carry_whole(settings: Settings, run_id: int, root: str | None, options: Mapping[str, Any]) -> Carry | None:
    """The whole base run carried, decided before the scenarios are listed (None: list and plan them).

    Where nothing any base cell's record names changed (files, data, listings, environment), listing
    the scenarios would find the base's, fingerprints included (``recorded_fingerprints``): the run is
    carried whole without starting a runner — a commit that changed only docs is answered in seconds.
    Anything to re-run, or any doubt, and it returns None: the usual plan decides cell by cell.
    """
    try:
        with session_scope(settings.database_url, readonly=True) as session:
            run = session.get(Run, run_id)
            if run is None or full_reason(session, run, settings) is not None:
                return None
            base = base_run(session, run)
            if base is None:
                return None
            cells = base_cells(session, base.id)
            workers = online_workers(session, within_s=settings.worker_online_s)
            base_id, base_sha = base.id, base.head_sha
        engine = plan_carry(cells, recorded_fingerprints(cells), CommitInputs(root),
                            environment_for(root, options, workers), {"run": base_id, "sha": base_sha})
        if engine.rerun or not engine.carried or len(engine.carried) != len(cells):
            return None
        rows = [carried_result(cell) for cell in engine.carried]
        return Carry(CarrySummary.of(base_id, base_sha, len(rows), {}), rows, engine.carried_groups)
    except Exception:  # when in doubt, run: the usual plan follows
        log.exception("run %s: carrying the whole run failed; the scenarios are listed", run_id)
        return None


def store_whole(session: Session, run_id: int, carry: Carry) -> None:
    """Store a run carried whole: its cells, reaches and summary, and the base's catalogs as its own."""
    store(session, run_id, carry)
    base = session.get(Run, carry.summary.base_run_id) if carry.summary.base_run_id is not None else None
    run = session.get(Run, run_id)
    if base is not None and run is not None:
        copy_catalogs(session, base.id, run_id)
        run.omitted_cells = base.omitted_cells


def planned_cells(source: Source, the_plan: planner.Plan) -> dict[Group, tuple[str, ...]]:
    """The plan's cells to run, as groups (scenario, backend, device) with their dtypes."""
    planned: dict[Group, tuple[str, ...]] = {}
    for job in the_plan.jobs:
        for name in job.scenarios:
            info = source.by_name.get(name)
            if info is not None:
                planned[(name, job.backend, job.device)] = planner.cell_dtypes(info.dtypes, the_plan.matrix.dtypes)
    return planned


def store(session: Session, run_id: int, carry: Carry) -> None:
    """Store the carried cells as the run's results, with their rule reaches, and the run's summary.

    In the plan's transaction, so that a run has its jobs and its carried cells together or neither.
    """
    run = session.get(Run, run_id)
    if run is None:
        return
    run.carry = carry.summary.to_dict()
    if carry.rows:
        upsert_results(session, run_id, carry.rows, provenance=True)
        if carry.summary.base_run_id is not None:
            copy_reaches(session, carry.summary.base_run_id, run_id, carry.groups)
    summary = carry.summary
    if summary.full:
        log.info("run %s: full run: %s", run_id, summary.full)
    elif summary.base_run_id is None:
        log.info("run %s: no base run to carry cells from", run_id)
    else:
        first = "; ".join(f"{r['scenario']} on {r['backend']}/{r['device']}: {r['reason']}"
                          for r in summary.reasons[:3])
        log.info("run %s: %d cells carried from run %s at %s; %d groups re-run%s", run_id, summary.carried,
                 summary.base_run_id, summary.base_sha, summary.rerun, f" ({first})" if first else "")
