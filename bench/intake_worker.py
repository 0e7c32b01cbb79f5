"""The worker side of ``bench/load.py``: a Celery worker (the service's configuration, prefork) that
acts on the stored webhook deliveries as ``gradci worker`` does — ``gradci.handle_delivery`` through
``act_on_delivery``, its plans and reports sent as real messages — and, in place of planning 3,000
checkouts and publishing to GitHub, counts each run's ``plan_run`` and ``publish_github`` messages
in a Redis hash, so that the benchmark can tell every run planned exactly once.

Run by ``bench/load.py``: python bench/intake_worker.py CONCURRENCY READY_FILE (settings from
GRADCI_*); READY_FILE is written once the worker consumes.
"""
from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import redis
from celery import Celery, signals

from gradci.services.broker.queues import (
    CONTROL_QUEUE,
    HANDLE_DELIVERY,
    PLAN_QUEUE,
    PLAN_RUN,
    PUBLISH_GITHUB,
    create_celery,
    queue_of_task,
)
from gradci.services.github.intake import act_on_delivery
from gradci.services.settings import Settings

PLANS, REPORTS = "bench:plans", "bench:reports"  # Redis hashes: run id → messages received


def create_app(settings: Settings) -> Celery:
    app = create_celery(settings)
    counter = redis.Redis.from_url(settings.broker_url)

    def send(task: str) -> Callable[[int], None]:
        def sender(run_id: int) -> None:
            app.send_task(task, args=[run_id], queue=queue_of_task(task))
        return sender

    @app.task(name=HANDLE_DELIVERY)
    def handle_delivery(delivery_id: int) -> None:
        act_on_delivery(settings, delivery_id, plan=send(PLAN_RUN), publish=send(PUBLISH_GITHUB))

    @app.task(name=PLAN_RUN)
    def count_plan(run_id: int) -> None:
        counter.hincrby(PLANS, str(run_id), 1)

    @app.task(name=PUBLISH_GITHUB)
    def count_report(run_id: int) -> None:
        counter.hincrby(REPORTS, str(run_id), 1)

    return app


def main() -> None:
    concurrency, ready = int(sys.argv[1]), Path(sys.argv[2])
    signals.worker_ready.connect(lambda **_: ready.write_text("ready"), weak=False)
    create_app(Settings()).worker_main(["worker", f"--queues={CONTROL_QUEUE},{PLAN_QUEUE}", "--pool=prefork",
                                        f"--concurrency={concurrency}", "--loglevel=WARNING",
                                        "--without-gossip", "--without-mingle", "--without-heartbeat"])


if __name__ == "__main__":
    main()
