"""What an earlier run says of which cells may fail now: the planner's order (``job_balance.Risk``).

Two readings of the earlier run: the rules its checkout defined (to tell which the change touched),
and the cells that reached given rules or failed, errored or nearly failed there.
"""
from __future__ import annotations

from collections.abc import Collection
from typing import Any

from sqlalchemy import and_, or_, select
from sqlalchemy.orm import Session

from gradci.scenarios.contract.cell import FAILING, Status
from gradci.services.db.models import Result, RuleCatalogEntry, RuleReach
from gradci.services.job_balance import NEAR_FAILURE, CostKey


def rule_methods(session: Session, run_id: int) -> dict[str, list[dict]]:
    """Rule id → its methods (names, digests) in the run's checkout."""
    return {rule_id: list(methods or ()) for rule_id, methods in session.execute(
        select(RuleCatalogEntry.rule_id, RuleCatalogEntry.methods).where(RuleCatalogEntry.run_id == run_id))}


def cells_reaching(session: Session, run_id: int, rule_ids: Collection[str]) -> set[CostKey]:
    """(scenario, backend, device) of the run's cells that ran a method of one of ``rule_ids``."""
    if not rule_ids:
        return set()
    return {(scenario, backend, device) for scenario, backend, device in session.execute(
        select(RuleReach.scenario, RuleReach.backend, RuleReach.device).distinct()
        .where(RuleReach.run_id == run_id, RuleReach.rule_id.in_(list(rule_ids))))}


def _within_near(error: Any, tolerance: Any) -> tuple[Any, Any]:
    """(whether the share is known, whether it is at least ``NEAR_FAILURE``) as SQL; tolerances are ≥ 0."""
    known = and_(error.is_not(None), tolerance.is_not(None), tolerance > 0)
    return known, or_(~known, error >= NEAR_FAILURE * tolerance)


def failing_cells(session: Session, run_id: int) -> set[CostKey]:
    """(scenario, backend, device) of the run's cells that failed, errored or passed unexpectedly, or nearly failed.

    Nearly: the smaller of its error's shares of atol and rtol (a component passes when either bound
    holds, as ``gradci.services.reports.diff.tolerance_ratio`` reads them) at least ``NEAR_FAILURE``.
    """
    abs_known, abs_near = _within_near(Result.max_abs_err, Result.atol)
    rel_known, rel_near = _within_near(Result.max_rel_err, Result.rtol)
    near = and_(Result.status == Status.PASS.value, or_(abs_known, rel_known), abs_near, rel_near)
    return {(scenario, backend, device) for scenario, backend, device in session.execute(
        select(Result.scenario, Result.backend, Result.device).distinct()
        .where(Result.run_id == run_id, or_(Result.status.in_(sorted(FAILING)), near)))}
