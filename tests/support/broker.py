"""What waits on the Redis broker: the messages the API queued, read without consuming them."""
from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from typing import Any

import redis

from gradci.scenarios.contract.devices import CPU
from gradci.services.broker.queues import CONTROL_QUEUE, TASK_QUEUES


def queued_tasks(redis_url: str, queues: Sequence[str] = (CONTROL_QUEUE, CPU)) -> list[tuple[str, list[Any]]]:
    """(task name, args) of every message waiting on the Redis ``queues`` (the control and cpu queues).

    Oldest first within each queue, the queues in the order given.
    """
    client = redis.Redis.from_url(redis_url)
    try:
        messages = [json.loads(raw) for queue in queues for raw in reversed(client.lrange(queue, 0, -1))]
    finally:
        client.close()
    return [(m["headers"]["task"], json.loads(base64.b64decode(m["body"]))[0]) for m in messages]


def send_task(broker_url: str, task: str, argument: int, queue: str | None = None) -> None:
    """``task(argument)`` sent to ``queue`` as the API or a worker sends it: by name, from a producer
    that imports none of the worker's code. Without ``queue``: the task's own (``TASK_QUEUES``),
    the CPU jobs' for ``run_job``."""
    from celery import Celery

    sender = Celery(broker=broker_url)
    try:
        sender.send_task(task, args=[argument], queue=queue or TASK_QUEUES.get(task, CPU))
    finally:
        sender.close()
