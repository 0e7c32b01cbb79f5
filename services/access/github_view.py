"""What GitHub lets a credential see of a repository, asked with that credential and kept for minutes.

The question is ``GET /repos/{owner}/{repo}``. A user's OAuth token is answered 200 for a repository
they may read (with their ``permissions``) and 404 for one they may not; no token is answered 200
for public repositories only. Answers are kept ``ttl_s`` seconds, never longer: someone removed from
a repository stops seeing it within that time. An answer that says nothing (GitHub unreachable, a
5xx, a rate limit) denies and is not kept.
"""
from __future__ import annotations

import dataclasses
import hashlib
import threading
import time
from collections import OrderedDict
from collections.abc import Callable

import httpx

MAX_ENTRIES = 10_000  # (credential, repository) answers kept; the oldest go first


@dataclasses.dataclass(frozen=True)
class RepoView:
    """GitHub's answer about one repository for one credential.

    Whether the credential reads the repository, whether it is private, and whether the credential may
    push to it (a user who may push may cancel its runs).
    """

    readable: bool
    private: bool | None = None
    push: bool = False


UNREADABLE = RepoView(readable=False)
KEPT_STATUSES = (200, 404)  # answers about the repository; anything else says nothing about it


class GitHubViews:
    """``view(full_name, token)``, cached per (credential, repository) for ``ttl_s`` seconds."""

    def __init__(self, api_url: str, ttl_s: float, timeout_s: float = 5.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._http = httpx.Client(base_url=api_url.rstrip("/"), timeout=timeout_s, headers={
            "Accept": "application/vnd.github+json", "X-GitHub-Api-Version": "2022-11-28", "User-Agent": "gradci"})
        self._ttl_s, self._clock = ttl_s, clock
        self._answers: OrderedDict[tuple[str, str], tuple[float, RepoView]] = OrderedDict()
        self._lock = threading.Lock()

    def close(self) -> None:
        self._http.close()

    def view(self, full_name: str, token: str | None) -> RepoView:
        # The token's digest, not the token: the cache never holds a credential.
        key = (hashlib.sha256(token.encode()).hexdigest() if token else "", full_name.lower())
        now = self._clock()
        with self._lock:
            kept = self._answers.get(key)
            if kept is not None and kept[0] > now:
                return kept[1]
        view, keep = self._ask(full_name, token)
        if keep:
            with self._lock:
                self._answers[key] = (now + self._ttl_s, view)
                self._answers.move_to_end(key)
                while len(self._answers) > MAX_ENTRIES:
                    self._answers.popitem(last=False)
        return view

    def _ask(self, full_name: str, token: str | None) -> tuple[RepoView, bool]:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        try:
            response = self._http.get(f"/repos/{full_name}", headers=headers)
        except httpx.HTTPError:
            return UNREADABLE, False
        if response.status_code != 200:
            return UNREADABLE, response.status_code in KEPT_STATUSES
        try:
            data = response.json()
        except ValueError:
            return UNREADABLE, False
        permissions = data.get("permissions") or {}
        return RepoView(readable=True, private=bool(data.get("private")), push=bool(permissions.get("push"))), True
