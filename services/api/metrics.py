"""/metrics: Prometheus gauges read from the database at scrape time.

The gauges count runs and results by status, and workers online by device, so every API replica
reports the same numbers.
"""
from __future__ import annotations

from collections.abc import Iterator

from fastapi import APIRouter, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from gradci.scenarios.contract.cell import Status
from gradci.services.api.access import OperatorAccess
from gradci.services.api.errors import errors
from gradci.services.db.models import Result, Run, RunStatus
from gradci.services.db.queries import totals_by_status
from gradci.services.db.session import sessionmaker_for
from gradci.services.db.workers import online_counts_by_device
from gradci.services.settings import Settings

router = APIRouter(tags=["metrics"])


def _by_label(name: str, documentation: str, label: str, counts: dict[str, int]) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, documentation, labels=[label])
    for value, count in sorted(counts.items()):
        family.add_metric([value], count)
    return family


class DatabaseCollector(Collector):
    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    def describe(self) -> list[GaugeMetricFamily]:
        # Declared empty so that registering does not query the database at startup.
        return []

    def collect(self) -> Iterator[GaugeMetricFamily]:
        up = GaugeMetricFamily("gradci_database_up", "1 when the database answered this scrape")
        try:
            with sessionmaker_for(self.settings.database_url, readonly=True)() as session:
                runs = dict.fromkeys(RunStatus.values(), 0) | totals_by_status(session, Run.status)
                results = dict.fromkeys(Status.values(), 0) | totals_by_status(session, Result.status)
                online = online_counts_by_device(session, within_s=self.settings.worker_online_s)
        except Exception:  # noqa: BLE001 - a scrape while the database is down is still an answer: up = 0
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        yield _by_label("gradci_runs", "Runs by status", "status", runs)
        yield _by_label("gradci_results", "Stored cell results by status", "status", results)
        yield _by_label("gradci_workers_online", "Workers with a recent heartbeat, by device", "device", online)


def metrics_registry(settings: Settings) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(DatabaseCollector(settings))
    return registry


@router.get("/metrics", response_class=Response,
            responses={200: {"content": {CONTENT_TYPE_LATEST: {}}}, **errors(401, 403)})
def metrics(request: Request, _: OperatorAccess) -> Response:
    """Operators only (Prometheus scrapes with the admin token: ``authorization.credentials``)."""
    return Response(generate_latest(request.app.state.metrics_registry), media_type=CONTENT_TYPE_LATEST)
