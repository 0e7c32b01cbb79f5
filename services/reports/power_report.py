"""Detection power in a run's report: the perturbations planted in a rule that no cell catches.

The records are the runner's (``gradci.scenarios.rules.power``), stored per cell
(``gradci.services.db.power``); the per-rule summary and its lines are the engine's own
(``summarize_power``), made from the stored cells and the run's rule catalog, so that ``gradci check
--power`` and the service say the same thing of the same cells. A pull request's run measures no
power: its report reads the repository's latest run of a branch that did.
"""
from __future__ import annotations

from sqlalchemy.orm import Session

from gradci.scenarios.rules.power import CellPower as CellPowerRecord
from gradci.scenarios.rules.power import RulePower, summarize_power
from gradci.services.db.models import Run
from gradci.services.db.power import as_cell, cell_powers, has_power, latest_power_run
from gradci.services.db.rules import rule_catalog
from gradci.services.reports.report_record import LIST_LIMIT, PowerFinding, PowerSection
from gradci.services.reports.rules_report import catalog_rule


def power_summary(session: Session, run_id: int) -> list[RulePower]:
    """Each rule's power over the run's measured cells (none: the run measured no power)."""
    rules = [catalog_rule(entry) for entry in rule_catalog(session, run_id)]
    cells = [(as_cell(result), CellPowerRecord.from_dict(power.record))
             for result, power in cell_powers(session, run_id)]
    return summarize_power(rules, cells) if cells else []


def power_source(session: Session, run: Run) -> Run | None:
    """The run whose power the report of ``run`` shows: its own, else for a pull request the latest branch run's."""
    if has_power(session, run.id):
        return run
    if run.pr_number is None:
        return None
    return latest_power_run(session, run.repository_id)


def power_section(session: Session, run: Run) -> PowerSection | None:
    source = power_source(session, run)
    if source is None:
        return None
    powers = power_summary(session, source.id)
    findings = [PowerFinding(rule_id=p.rule.id, name=p.rule.name, file=p.rule.file, text=line)
                for p in powers for line in p.findings()]
    return PowerSection(run_id=source.id, head_sha=source.head_sha, own=source.id == run.id, rule_count=len(powers),
                        findings=findings[:LIST_LIMIT], finding_count=len(findings))
