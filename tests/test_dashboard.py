"""The dashboard pages render runs and their cells (server-side HTML, real database)."""
from __future__ import annotations

from fastapi.testclient import TestClient

from services.db.results import upsert_results
from services.db.runs import create_run
from services.db.session import session_scope
from services.settings import Settings
from web.app import create_app


def test_run_list_and_run_page(clean_environment, sqlite_url, tmp_path, cell_factory):
    with session_scope(sqlite_url) as session:
        run = create_run(session, head_sha="a" * 40)
        upsert_results(session, run.id, [cell_factory(i) for i in range(8)])
        run_id = run.id
    settings = Settings(database_url=sqlite_url, workdir=tmp_path / "work")
    with TestClient(create_app(settings)) as client:
        listing = client.get("/")
        assert listing.status_code == 200 and f"/runs/{run_id}" in listing.text
        page = client.get(f"/runs/{run_id}")
        assert page.status_code == 200
        assert "scenario_00003" in page.text and 'class="fail"' in page.text
        assert page.text.index("scenario_00003") < page.text.index("scenario_00000")  # failures first
        assert client.get("/runs/999").status_code == 404
