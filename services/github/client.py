"""A small GitHub REST client for what gradci writes: commit statuses and one PR comment (its own).

Retries with exponential backoff on 5xx and on rate limits (403/429 with Retry-After or an exhausted
X-RateLimit-Remaining); other 4xx are the caller's bug and raise at once.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import httpx

from gradci.scenarios.contract.wording import count_of
from gradci.services.github_limits import COMMENT_BODY_LIMIT, STATUS_DESCRIPTION_LIMIT

STATES = ("pending", "success", "failure", "error")


class GitHubError(RuntimeError):
    def __init__(self, message: str, status_code: int | None = None, retryable: bool = False):
        super().__init__(message)
        self.status_code, self.retryable = status_code, retryable


class GitHubClient:
    def __init__(self, api_url: str, token: str | None, attempts: int = 4, backoff_s: float = 0.5,
                 timeout_s: float = 10.0, sleep: Callable[[float], None] = time.sleep):
        headers = {"Accept": "application/vnd.github+json", "X-GitHub-Api-Version": "2022-11-28",
                   "User-Agent": "gradci"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        self._http = httpx.Client(base_url=api_url.rstrip("/"), headers=headers, timeout=timeout_s)
        self._attempts, self._backoff_s, self._sleep = attempts, backoff_s, sleep

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> GitHubClient:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        delay = self._backoff_s
        for attempt in range(1, self._attempts + 1):
            try:
                response = self._http.request(method, path, **kwargs)
            except httpx.TransportError as exc:
                if attempt == self._attempts:
                    raise GitHubError(f"{method} {path}: {exc}", retryable=True) from exc
                self._sleep(delay)
                delay *= 2
                continue
            wait = _retry_after(response)
            if wait is None:
                if response.is_error:
                    raise GitHubError(f"{method} {path}: {response.status_code} {response.text[:200]}",
                                      response.status_code)
                return response
            if attempt == self._attempts:
                raise GitHubError(f"{method} {path}: {response.status_code} after {count_of(attempt, 'attempt')}",
                                  response.status_code, retryable=True)
            self._sleep(max(wait, delay))
            delay *= 2
        raise AssertionError("unreachable")

    def set_status(self, full_name: str, sha: str, context: str, state: str, description: str,
                   target_url: str | None = None) -> dict:
        if state not in STATES:
            raise ValueError(f"unknown status state {state!r}")
        body = {"state": state, "context": context, "description": truncate(description, STATUS_DESCRIPTION_LIMIT)}
        if target_url:
            body["target_url"] = target_url
        return self.request("POST", f"/repos/{full_name}/statuses/{sha}", json=body).json()

    def upsert_comment(self, full_name: str, pr_number: int, body: str, marker: str, author: str) -> dict:
        """Edit ``author``'s comment carrying ``marker`` in place, or create it: one comment per pull request."""
        body = truncate(body, COMMENT_BODY_LIMIT)
        existing = self.find_comment(full_name, pr_number, marker, author)
        if existing is not None:
            return self.request("PATCH", f"/repos/{full_name}/issues/comments/{existing['id']}",
                                json={"body": body}).json()
        return self.request("POST", f"/repos/{full_name}/issues/{pr_number}/comments", json={"body": body}).json()

    def pull_request(self, full_name: str, pr_number: int) -> dict:
        """The pull request as GitHub describes it (head and base repositories, labels)."""
        return self.request("GET", f"/repos/{full_name}/pulls/{pr_number}").json()

    def find_comment(self, full_name: str, pr_number: int, marker: str, author: str) -> dict | None:
        """The first comment ``author`` wrote that carries ``marker``.

        The marker alone is no proof: anyone can copy it into a comment of theirs.
        """
        page = 1
        while True:
            comments = self.request("GET", f"/repos/{full_name}/issues/{pr_number}/comments",
                                    params={"per_page": 100, "page": page}).json()
            for comment in comments:
                if marker in (comment.get("body") or "") and _login(comment).lower() == author.lower():
                    return comment
            if len(comments) < 100:
                return None
            page += 1


def _login(comment: dict) -> str:
    """The login of a comment's author ("" when GitHub names none: a deleted account, "ghost")."""
    user = comment.get("user")
    return str(user.get("login") or "") if isinstance(user, dict) else ""


def _retry_after(response: httpx.Response) -> float | None:
    """Seconds to wait before retrying, or None when the response is final."""
    if response.status_code >= 500:
        return 0.0
    if response.status_code in (403, 429):
        if "retry-after" in response.headers:
            return float(response.headers["retry-after"])
        if response.headers.get("x-ratelimit-remaining") == "0":
            reset = float(response.headers.get("x-ratelimit-reset", time.time()))
            return max(0.0, min(reset - time.time(), 60.0))
        if response.status_code == 429:
            return 1.0
    return None


def truncate(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return text[: limit - 1] + "…"
