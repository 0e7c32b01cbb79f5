"""Real GitHub webhook payloads (octokit/webhooks examples, from shared/github-payloads, vendored with
their license so the suite runs from any clone)."""
from __future__ import annotations

import json
from pathlib import Path

PAYLOADS = Path(__file__).resolve().parent.parent / "data" / "github-payloads"


def payload(name: str) -> dict:
    return json.loads((PAYLOADS / f"{name}.json").read_text())
