"""Which task messages the broker still holds: what the reconciler compares the database with.

A job the database holds as queued, or a run it holds as unplanned, is lost when no message for it
is left in the broker — Redis restarted without persistence, a worker acknowledged it after a
failure, a producer died between committing and sending. Each transport is read the way kombu
stores it:

- Redis: a queue is one list per priority step (``cpu``, ``cpu\\x06\\x163``, …); a message a
  worker took but has not acknowledged (acks_late: it runs, or waits for its ETA) sits in the
  ``unacked`` hash, with the time it was taken in the ``unacked_index`` sorted set.
- The embedded SQLAlchemy transport: a table of messages, ``visible`` until a worker takes one;
  taken messages stay invisible for good, so only waiting ones can be seen.

What is returned says, per task, whether a message for it waits in its queue or since when a
worker has held one (the caller decides how long a hold stays credible: a worker that died keeps
its message in ``unacked`` until the visibility timeout, hours later).
"""
from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from kombu.utils.json import loads

from gradci.services.broker.dispatch import broker_connection
from gradci.services.settings import Settings

TaskKey = tuple[str, int]  # (task name, its first argument: a job's or a run's id)
WAITING = None  # in place of the time a worker took the message
PAGE = 1000  # messages read per Redis round trip


class UnknownTransport(RuntimeError):
    """A broker whose stored messages this module cannot read: the caller cannot tell lost from held."""


def broker_tasks(settings: Settings, queues: Iterable[str]) -> dict[TaskKey, float | None]:
    """Every task with a message for ``queues`` in the broker, and when it was last taken.

    ``WAITING`` when one waits in its queue, else the time (``time.time()``) a worker took the latest
    one.
    """
    with broker_connection(settings) as connection:
        channel = connection.default_channel
        driver = connection.transport.driver_type
        if driver == "redis":
            messages = _redis_messages(channel, sorted(set(queues)))
        elif driver == "sql":
            messages = ((payload, WAITING) for payload in _sqlalchemy_payloads(channel, sorted(set(queues))))
        else:
            raise UnknownTransport(f"cannot list the messages of a {driver!r} broker")
        found: dict[TaskKey, float | None] = {}
        for payload, taken_at in messages:
            key = _task_key(channel, payload)
            if key is None or (key in found and found[key] is WAITING):
                continue  # not ours, or already known to wait
            found[key] = taken_at if taken_at is WAITING else max(taken_at, found.get(key) or 0.0)
        return found


def _redis_messages(channel: Any, queues: Sequence[str]) -> Iterator[tuple[dict[str, Any], float | None]]:
    client = channel.client
    for queue in queues:
        for step in channel.priority_steps:
            key = f"{queue}{channel.sep}{step}" if step else queue
            start = 0
            while page := client.lrange(key, start, start + PAGE - 1):
                yield from ((loads(raw), WAITING) for raw in page)
                start += PAGE
    taken = client.zrange(channel.unacked_index_key, 0, -1, withscores=True)
    for offset in range(0, len(taken), PAGE):
        tags = taken[offset:offset + PAGE]
        for (_tag, taken_at), raw in zip(tags, client.hmget(channel.unacked_key, [tag for tag, _ in tags])):
            if raw is not None:
                payload, _exchange, routing_key = loads(raw)
                if routing_key in queues:
                    yield payload, taken_at


def _sqlalchemy_payloads(channel: Any, queues: Sequence[str]) -> Iterator[dict[str, Any]]:
    message, queue = channel.message_cls, channel.queue_cls
    rows = (channel.session.query(message.payload).join(queue, queue.id == message.queue_id)
            .filter(queue.name.in_(queues), message.visible.is_(True)))
    try:
        yield from (loads(payload) for (payload,) in rows)
    finally:
        channel.session.commit()  # end the read transaction: SQLite's WAL keeps a snapshot otherwise


def _task_key(channel: Any, payload: dict[str, Any]) -> TaskKey | None:
    """Celery's message protocol 2: the task's name in the headers, [args, kwargs, embed] as the body."""
    message = channel.Message(payload, channel=channel)
    task = (message.headers or {}).get("task")
    try:
        args = message.decode()[0]
        return (task, int(args[0])) if task and args else None
    except (TypeError, ValueError, IndexError, KeyError):
        return None  # not one of ours

