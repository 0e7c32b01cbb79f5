"""Labels a repository chooses are text in every plot: plotly reads ``<a href>``, ``<b>`` and ``<br>`` in
any string it draws, so a scenario named ``<a href=…>`` would be a live link on the run page's heatmap
and the history's charts. Checked on the figures the pages ship, with plotly's own rule: a ``<…>``
in a string is a tag, entities are shown as their characters."""
from __future__ import annotations

import html
import json
import re
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import quote

import pytest
from fastapi.testclient import TestClient

from gradci.services.db.results import upsert_results
from gradci.services.db.runs import create_run, get_or_create_repository
from gradci.services.db.session import session_scope
from gradci.services.settings import Settings
from gradci.web.app import create_app

NAME = 'evil/<a href="https://evil.example">Approve now</a> &amp; <b>bold</b>'
DEVICE = "cpu<br><img src=x>"
PLOTLY_TAG = re.compile(r"<[^<>]*>")  # how plotly's text renderer finds a tag


@pytest.fixture
def client(database_url: str, tmp_path: Any, clean_environment: None) -> Iterator[TestClient]:
    settings = Settings(database_url=database_url, workdir=tmp_path / "work", read_access="local")
    with TestClient(create_app(settings), base_url="http://127.0.0.1") as test_client:
        yield test_client


def hostile_run(url: str, cell_factory: Callable[..., dict[str, Any]]) -> tuple[int, int, str]:
    """A finished run of one failing cell of ``NAME`` on ``DEVICE``: (run id, repository id, the
    cell's backend · device · dtype)."""
    made = {**cell_factory(0, status="fail", device=DEVICE), "scenario": NAME}
    with session_scope(url) as session:
        repository = get_or_create_repository(session, "https://github.com/o/r.git", "o/r")
        run = create_run(session, repository=repository, head_sha="c" * 40)
        run.status = "failed"
        upsert_results(session, run.id, [made])
        return run.id, repository.id, " · ".join((made["backend"], DEVICE, made["dtype"]))


def shipped(page: str, pattern: str) -> Any:
    found = re.search(pattern, page, re.S)
    assert found, pattern
    return json.loads(found.group(1))


def assert_text(label: str, original: str) -> None:
    assert not PLOTLY_TAG.search(label), label
    assert html.unescape(label) == original


def test_hostile_labels_are_text_in_the_heatmap_and_the_history(database_url: str, client: TestClient,
                                                                 cell_factory: Callable[..., dict[str, Any]]) -> None:
    run_id, repository, column = hostile_run(database_url, cell_factory)
    page = client.get(f"/runs/{run_id}")
    assert page.status_code == 200
    trace = shipped(page.text, r'<script type="application/json" data-chart="heatmap">(.*?)</script>')["data"][0]
    [family], [name] = trace["y"]
    assert_text(family, "evil")
    assert_text(name, NAME.split("/", 1)[1])
    assert trace["x"] == [trace["x"][0]]
    assert_text(trace["x"][0], column)

    history = client.get(f"/scenarios/{quote(NAME, safe='/')}?repository={repository}")
    assert history.status_code == 200
    data = shipped(history.text, r'<script type="application/json" id="history-data">(.*?)</script>')["data"]
    [series] = data["series"]
    assert_text(series, column)
