"""A job's finite-difference references: kept from default-branch runs, offered to later runs.

A pull request that changed one rule re-runs the cells that reached it, and their references, all
but always computed from code the change did not touch, cost most of its wait: finite differences
evaluate f dozens of times. A default-branch push's job asks its runner to keep each reference it
computes (``keep_references``), with the dependency record of that computation (the project's code
it ran, the files it read: ``gradci.scenarios.rules.tracing``), stamps the environment on it here,
as it does on a cell's record (not the commit: the same inputs at the next commit make the same
record, stored once), and stores it (``gradci.services.db.carried_references``).

A later run's job (one that carries from a base run: a full run computes everything), before its
cells, looks up its scenarios' stored references and offers its runner those whose record digests
the same at its checkout in its environment (``CommitInputs.changed``, as a carried cell is
decided); the runner uses one only for the scenario whose cache key it names, and computes the
rest. Only trusted runs store: a pull request's code never writes what another run reads, and
the payload is read only inside a runner's box, never in this process.
"""
from __future__ import annotations

import base64
import logging
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from gradci.scenarios.affected.carry import ENVIRONMENT_KEY, CommitInputs
from gradci.scenarios.affected.environment import Environment
from gradci.services.db.carried_references import keep_references, stored_references
from gradci.services.db.session import session_scope
from gradci.worker.sources import RunRef, Source

log = logging.getLogger(__name__)


def offered_references(run: RunRef) -> bool:
    """Whether the run's jobs are offered the references kept for its repository's scenarios.

    A pull request's, which carries from a base run: a full run computes everything again, its
    references too (that is what it is asked for), and a trusted run keeps its own.
    """
    return run.repository_id is not None and not run.trusted and run.carrying


class JobReferences:
    """What one job's requests add to carry references: keep them (a trusted run), or offer them."""

    def __init__(self, database: str, run: RunRef, source: Source, environment: Environment,
                 scenarios: Collection[str], *, keep: bool = True) -> None:
        """``keep``: whether a trusted run keeps its references (``GRADCI_KEEP_REFERENCES``)."""
        self.database, self.run, self.source, self.environment = database, run, source, environment
        repository = run.repository_id if source.root is not None else None
        self.keeping = keep and repository is not None and run.trusted
        self.offers: dict[str, list[dict[str, Any]]] = {}
        if repository is not None and offered_references(run):
            try:
                self.offers = self._valid_offers(repository, scenarios)
            except Exception:  # when in doubt, compute: a reference offered wrongly would decide verdicts
                log.exception("run %s: no references offered", run.id)

    def options(self, scenario: str) -> dict[str, Any]:
        """The request options for ``scenario``'s cells: keep its references, or the ones offered."""
        if self.keeping:
            return {"keep_references": True}
        offers = self.offers.get(scenario)
        return {"references": offers} if offers else {}

    def keep(self, scenario: str, references: Sequence[Mapping[str, Any]]) -> None:
        """Store what the runner kept of ``scenario``'s references (a trusted run's; others are dropped)."""
        if not self.keeping or not references or self.run.repository_id is None:
            return
        rows = []
        for reference in references:
            try:
                payload = base64.b64decode(str(reference["payload"]), validate=True)
                # No commit in it, unlike a cell's: the same inputs at the next commit are the same record.
                depends = {**dict(reference["depends"]), ENVIRONMENT_KEY: self.environment}
                rows.append((scenario, str(reference["key"]), payload, depends))
            except (KeyError, TypeError, ValueError):
                continue  # a malformed one is not kept: the next run computes it
        with session_scope(self.database) as session:
            keep_references(session, self.run.repository_id, self.run.id, self.source.sha, rows)

    def _valid_offers(self, repository: int, scenarios: Collection[str]) -> dict[str, list[dict[str, Any]]]:
        with session_scope(self.database, readonly=True) as session:
            stored = stored_references(session, repository, scenarios)
        inputs = CommitInputs(self.source.root)
        offers: dict[str, list[dict[str, Any]]] = {}
        seen: set[str] = set()
        for reference in stored:  # newest first: the first valid one of a key is offered
            if reference.cache_key in seen or inputs.changed(reference.depends, self.environment) is not None:
                continue
            seen.add(reference.cache_key)
            origin = f"run {reference.run_id}" + (f" at {reference.sha[:7]}" if reference.sha else "")
            offers.setdefault(reference.scenario, []).append(
                {"key": reference.cache_key, "payload": base64.b64encode(reference.payload).decode(), "origin": origin})
        if offers:
            log.info("run %s: %d references of earlier runs offered (their inputs unchanged)", self.run.id,
                     sum(map(len, offers.values())))
        return offers
