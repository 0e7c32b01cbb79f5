"""The embedded broker of `gradci up` without Redis, polled faster than kombu's default.

It is kombu's SQLAlchemy transport (``sqla+sqlite://``), polled every ``POLLING_INTERVAL_S`` instead
of kombu's second.

A kombu virtual transport sleeps its polling interval whenever every queue its consumer reads is
empty, so each message sent to an idle worker — a run to plan, each of its jobs when the worker
frees up, the run to finish — waited up to a second. The interval cannot be given as a transport
option: this transport hands its options to SQLAlchemy's ``create_engine``, which refuses it. This
subclass sets it, and Celery and kombu are given the subclass by its import path (never through a
URL, which may not name a module: kombu #2641).
"""
from __future__ import annotations

from kombu.transport import sqlalchemy as kombu_sqlalchemy

# An idle worker's poll is one query per queue on a local SQLite file: ten a second cost well under
# 1% of a core, and a message waits 50 ms on average instead of 500.
POLLING_INTERVAL_S = 0.1


class Transport(kombu_sqlalchemy.Transport):
    polling_interval = POLLING_INTERVAL_S
