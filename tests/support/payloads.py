"""Real GitHub webhook payloads (octokit/webhooks examples, from shared/github-payloads, vendored with
their license so the suite runs from any clone)."""
from __future__ import annotations

import json
from pathlib import Path

PAYLOADS = Path(__file__).resolve().parent.parent / "data" / "github-payloads"


def payload(name: str) -> dict:
    return json.loads((PAYLOADS / f"{name}.json").read_text())


def pull_request(action: str, head: str, base: str) -> dict:
    """GitHub's ``pull_request`` example (Codertocat/Hello-World#2) with ``action``, from ``head`` onto ``base``."""
    body = payload("pull_request.opened")
    body["action"] = action
    body["pull_request"]["head"]["sha"], body["pull_request"]["base"]["sha"] = head, base
    return body
