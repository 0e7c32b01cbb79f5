"""Signing in to a gradci app through the fake GitHub's OAuth web flow, as a browser would: the app's
``/login`` redirects to GitHub's authorize page, the person submits it, GitHub redirects back with a
code, and the app's callback exchanges it (over real HTTP, with Authlib) and sets the session."""
from __future__ import annotations

from urllib.parse import parse_qsl, urlsplit

import httpx
from fastapi.testclient import TestClient

from tests.support.fake_github import FakeGitHub


def sign_in(client: TestClient, github: FakeGitHub, login: str, next_path: str = "/") -> httpx.Response:
    """Sign ``client`` in as ``login``; the callback's answer (a 303 to ``next_path`` when it worked)."""
    to_github = client.get("/login", params={"next": next_path}, follow_redirects=False)
    assert to_github.status_code == 302, to_github.text
    authorize = urlsplit(to_github.headers["location"])
    assert f"{authorize.scheme}://{authorize.netloc}" == github.url and authorize.path == "/login/oauth/authorize"
    back = httpx.post(f"{github.url}/login/oauth/authorize", data={**dict(parse_qsl(authorize.query)), "login": login},
                      follow_redirects=False)
    assert back.status_code == 302, back.text
    return client.get(back.headers["location"], follow_redirects=False)
