"""Carried cells on the dashboard: the run page says what was carried and why the rest re-ran, a carried
cell has a badge and its page links to its origin; what the repository names is escaped."""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from gradci.services.db.dependencies import CarrySummary
from gradci.services.db.models import Result
from gradci.services.db.results import upsert_results
from gradci.services.db.runs import create_run, get_or_create_repository
from gradci.services.db.session import session_scope
from gradci.services.settings import Settings
from gradci.web.app import create_app

HOSTILE = '<script>alert("x")</script>'


@pytest.fixture
def client(database_url: str, tmp_path: Any, clean_environment: None) -> Iterator[TestClient]:
    settings = Settings(database_url=database_url, workdir=tmp_path / "work", read_access="local")
    with TestClient(create_app(settings), base_url="http://127.0.0.1") as test_client:
        yield test_client


def test_a_carried_cell_shows_where_it_came_from_and_nothing_the_repository_names_runs(client, database_url,
                                                                                       cell_factory):
    with session_scope(database_url) as session:
        repository = get_or_create_repository(session, "file:///m/o/r.git", "o/r")
        base, head = (create_run(session, repository=repository, head_sha=sha * 40) for sha in "ab")
        base.status = head.status = "passed"
        fresh = {**cell_factory(0, status="pass"), "scenario": HOSTILE}
        upsert_results(session, base.id, [fresh])
        upsert_results(session, head.id, [{**fresh, "carried_run_id": base.id, "carried_sha": "a" * 40,
                                           "carried_reason": "inputs unchanged"}], provenance=True)
        head.carry = CarrySummary.of(base.id, "a" * 40, 1, {(HOSTILE, "torch-rev", "cpu"): f"{HOSTILE} changed"}
                                     ).to_dict()
        ids = (base.id, head.id)
    with session_scope(database_url, readonly=True) as session:
        origin, carried = (session.scalars(select(Result.id).where(Result.run_id == run_id)).one() for run_id in ids)
    page = client.get(f"/runs/{ids[1]}").text
    assert 'id="carried-summary"' in page and f'<a href="/runs/{ids[0]}">run #{ids[0]}</a>' in page
    assert "<strong>1</strong> cell carried" in page and 'class="badge carried"' in page
    assert HOSTILE not in page and "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt; changed" in page
    cell_page = client.get(f"/runs/{ids[1]}/cells/{carried}").text
    assert f'href="/runs/{ids[0]}/cells/{origin}"' in cell_page and "inputs unchanged" in cell_page
    assert HOSTILE not in cell_page
    # A fresh cell has no badge, and its run no carried line.
    assert 'id="carried"' not in client.get(f"/runs/{ids[0]}/cells/{origin}").text
    assert 'id="carried-summary"' not in client.get(f"/runs/{ids[0]}").text
