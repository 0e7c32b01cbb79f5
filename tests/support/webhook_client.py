"""What the webhook tests share: GitHub's side of a delivery (signed or not), the worker's side of a
stored one (in process), and reading back the runs."""
from __future__ import annotations

import json
import socket
import uuid

import httpx
from fastapi.testclient import TestClient
from sqlalchemy import select

from gradci.services.broker import dispatch
from gradci.services.db.models import Delivery, Run
from gradci.services.db.session import session_scope
from gradci.services.github.intake import Outcome, act_on_delivery
from gradci.services.github.signature import sign
from gradci.services.settings import Settings

SECRET = "webhook-s3cret"
HEAD, BASE = "ec26c3e57ca3a959ca5aad62de7213c562f8c821", "f95f852bd8fca8fcc58a9a2d6c842781e32a215e"


def webhook_headers(event: str, raw: bytes, delivery: str | None = None, secret: str = SECRET,
                    signed: bool = True) -> dict[str, str]:
    headers = {"X-GitHub-Event": event, "X-GitHub-Delivery": delivery or str(uuid.uuid4()),
               "Content-Type": "application/json"}
    if signed:
        headers["X-Hub-Signature-256"] = sign(secret, raw)
    return headers


def deliver(client: TestClient | httpx.Client, event: str, body: dict | bytes, delivery: str | None = None,
            secret: str = SECRET, signed: bool = True) -> httpx.Response:
    """A delivery as GitHub sends it, to an app in process (TestClient) or a server over HTTP."""
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    return client.post("/webhooks/github", content=raw,
                       headers=webhook_headers(event, raw, delivery, secret, signed))


def deliver_over_http(url: str, event: str, body: dict, delivery: str | None = None,
                      secret: str = SECRET) -> httpx.Response:
    """``deliver`` to a server at ``url``."""
    with httpx.Client(base_url=url, timeout=10) as client:
        return deliver(client, event, body, delivery, secret)


def act_on_stored(settings: Settings) -> list[Outcome]:
    """What a worker does with the stored deliveries' messages, in this process: each delivery no
    worker acted on yet, in stored order, its plans and reports sent to the settings' broker."""
    with session_scope(settings.database_url, readonly=True) as session:
        pending = list(session.scalars(select(Delivery.id).where(Delivery.processed_at.is_(None)).order_by(Delivery.id)))
    return [outcome for delivery in pending for outcome in act_on_delivery(
        settings, delivery, plan=lambda run_id: dispatch.submit_plan(run_id, settings),
        publish=lambda run_id: dispatch.submit_publish(run_id, settings))]


def runs(url: str) -> list[Run]:
    with session_scope(url, readonly=True) as session:
        return list(session.scalars(select(Run).order_by(Run.id)))


def closed_port() -> int:
    """A loopback port nothing listens on: a server that is down."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]
