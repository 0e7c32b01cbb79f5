"""What waits on the Redis broker: the messages the API queued, read without consuming them."""
from __future__ import annotations

import base64
import json
from typing import Any

import redis


def queued_plan_runs(redis_url: str) -> list[tuple[str, list[Any]]]:
    """(task name, args) of every message waiting on the Redis "cpu" queue, oldest first."""
    client = redis.Redis.from_url(redis_url)
    try:
        messages = [json.loads(raw) for raw in reversed(client.lrange("cpu", 0, -1))]
    finally:
        client.close()
    return [(m["headers"]["task"], json.loads(base64.b64decode(m["body"]))[0]) for m in messages]


def send_task(broker_url: str, task: str, argument: int, queue: str = "cpu") -> None:
    """``task(argument)`` sent to ``queue`` as the API or a worker sends it: by name, from a producer
    that imports none of the worker's code."""
    from celery import Celery

    sender = Celery(broker=broker_url)
    try:
        sender.send_task(task, args=[argument], queue=queue)
    finally:
        sender.close()
