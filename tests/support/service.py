"""A gradci service as real processes, the one way tests start one: ``gradci api`` and ``gradci
worker`` (``gradci.testing.service``), plus what tests read back of a run: its results and jobs."""
from __future__ import annotations

from sqlalchemy import select

from gradci.services.db.models import Job, Result
from gradci.services.db.session import session_scope
from gradci.testing.served_app import ServedApp, served_app
from gradci.testing.service import (
    FINISHED,
    TOKEN,
    Service,
    api_answers,
    health,
    running_service,
    start_api,
    start_worker,
    workers_online,
)

__all__ = ["FINISHED", "TOKEN", "ServedApp", "Service", "api_answers", "assert_each_cell_once", "health", "jobs_of",
           "results_of", "running_service", "served_app", "start_api", "start_worker", "workers_online"]


def results_of(database_url: str, run_id: int) -> list[Result]:
    with session_scope(database_url, readonly=True) as session:
        return list(session.scalars(select(Result).where(Result.run_id == run_id).order_by(Result.id)))


def jobs_of(database_url: str, run_id: int) -> list[Job]:
    with session_scope(database_url, readonly=True) as session:
        return list(session.scalars(select(Job).where(Job.run_id == run_id).order_by(Job.id)))


def assert_each_cell_once(results: list[Result]) -> None:
    keys = [(r.scenario, r.backend, r.device, r.dtype) for r in results]
    assert len(keys) == len(set(keys)), "a cell was stored twice"
