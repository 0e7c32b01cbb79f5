"""The REST API against real PostgreSQL (and SQLite), a real Redis broker, the embedded
SQLite transport read by another process, and one server run by uvicorn over loopback HTTP."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from gradci._testing.processes import service_env
from gradci._testing.served_app import serving_api
from gradci.scenarios.contract.matrix import exact_pattern
from gradci.services.api.app import create_app
from gradci.services.api.runs import accepts_gzip
from gradci.services.db.models import Job, Run, RunStatus, Worker, utcnow
from gradci.services.db.results import upsert_results
from gradci.services.db.runs import create_run, get_or_create_repository
from gradci.services.db.session import session_scope
from gradci.services.db.workers import record_heartbeat
from gradci.services.reports.run_report import store_report
from gradci.services.settings import Settings
from tests.support.broker import queued_tasks

pytestmark = pytest.mark.integration

REPO_ROOT = Path(__file__).resolve().parents[2]
TOKEN = "s3cret-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
LOCAL = "http://127.0.0.1"
UNREACHABLE_REDIS = "redis://127.0.0.1:1/0"
UNREACHABLE_POSTGRES = "postgresql+psycopg://postgres@127.0.0.1:1/nothing?connect_timeout=2"


@pytest.fixture
def settings(clean_environment, database_url: str, redis_url: str, tmp_path: Path) -> Settings:
    # Who may read is test_read_access.py's: here the reader is gradci up's local user, who sees
    # everything (read_access "local", requests to a loopback address: LOCAL).
    return Settings(database_url=database_url, broker_url=redis_url, api_token=TOKEN, workdir=tmp_path / "work",
                    read_access="local")


@pytest.fixture
def client(settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(settings), base_url=LOCAL) as test_client:
        yield test_client


def client_for(settings: Settings, **changes: Any) -> TestClient:
    return TestClient(create_app(settings.model_copy(update=changes)), base_url=LOCAL)


def seed_cells(url: str, run_id: int, cells: list[dict[str, Any]]) -> None:
    with session_scope(url) as session:
        upsert_results(session, run_id, cells)


def seed_run(url: str, cells: list[dict[str, Any]], jobs: tuple[str, ...] = (), **fields: Any) -> int:
    with session_scope(url) as session:
        run = create_run(session, **fields)
        upsert_results(session, run.id, cells)
        for status in jobs:
            session.add(Job(run_id=run.id, backend="jax-rev", device="cpu", queue="cpu", scenarios=[], status=status))
        return run.id


# --- submitting runs ----------------------------------------------------------------------------


def test_writes_need_the_bearer_token(client: TestClient) -> None:
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": f"Basic {TOKEN}"}):
        response = client.post("/api/runs", json={}, headers=headers)
        assert response.status_code == 401
        assert "GRADCI_API_TOKEN" in response.json()["detail"]
        assert response.headers["www-authenticate"] == "Bearer"
    for path in ("/api/runs/1/cancel", "/api/runs/1/rerun"):
        assert client.post(path).status_code == 401
    assert client.get("/api/runs").status_code == 200  # reads stay open


def test_without_a_configured_token_writes_are_open(settings: Settings) -> None:
    with client_for(settings, api_token=None) as open_client:
        assert open_client.post("/api/runs", json={}).status_code == 201


def test_submit_builtin_run_creates_it_and_queues_plan_run(client: TestClient, settings: Settings) -> None:
    response = client.post("/api/runs", json={"backends": ["jax-rev"], "dtypes": ["float32"], "scenarios": "sin*"},
                           headers=AUTH)
    assert response.status_code == 201
    created = response.json()
    assert created["status"] == "queued" and created["url"].endswith(f"/runs/{created['id']}")
    assert queued_tasks(settings.broker_url) == [("gradci.plan_run", [created["id"]])]

    run = client.get(f"/api/runs/{created['id']}").json()
    assert run["repo"] is None and run["trigger"] == "api" and run["coverage"] is None
    assert run["matrix"] == {"backends": ["jax-rev"], "devices": None, "dtypes": ["float32"], "scenarios": ["sin*"]}
    assert run["counts"] == {"pass": 0, "fail": 0, "error": 0, "skip": 0, "xfail": 0, "xpass": 0, "queued": 0, "running": 0}
    assert run["options"] == {}


def test_a_run_may_ask_for_repeats_and_its_rerun_keeps_them(client: TestClient, settings: Settings, cell_factory) -> None:
    created = client.post("/api/runs", json={"repeats": 3}, headers=AUTH).json()
    assert client.get(f"/api/runs/{created['id']}").json()["options"] == {"repeats": 3}
    for wrong in (0, 101, 2.5, "three"):
        assert client.post("/api/runs", json={"repeats": wrong}, headers=AUTH).status_code == 422, wrong
    parent = seed_run(settings.database_url, [cell_factory(3)], options={"repeats": 4})
    child = client.post(f"/api/runs/{parent}/rerun", headers=AUTH).json()
    assert client.get(f"/api/runs/{child['id']}").json()["options"] == {"repeats": 4}


@pytest.mark.parametrize(
    ("repo", "url", "full_name"),
    [
        ("acme/kernels", "https://github.com/acme/kernels.git", "acme/kernels"),
        ("/srv/git/kernels", "/srv/git/kernels", None),
        ("file:///srv/git/kernels", "file:///srv/git/kernels", None),
        ("https://git.example.org/k.git", "https://git.example.org/k.git", None),
    ],
)
def test_submit_names_repositories_by_url_path_or_owner_name(client, repo, url, full_name) -> None:
    sha = "0123456789ABCDEF0123456789abcdef01234567"
    created = client.post("/api/runs", json={"repo": repo, "sha": sha, "ref": "main"}, headers=AUTH).json()
    run = client.get(f"/api/runs/{created['id']}").json()
    assert (run["repo"], run["repo_full_name"], run["head_sha"], run["ref"]) == (url, full_name, sha.lower(), "main")


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"repo": "relative/path/x"}, "neither a git URL"),
        ({"repo": "ftp://host/x.git"}, "scheme 'ftp'"),
        ({"sha": "a" * 40}, "need a repo"),
        ({"repo": "acme/k", "sha": "not-a-sha"}, "pattern"),
        ({"backends": []}, "at least 1"),
        ({"backends": ["jax rev"]}, "pattern"),
        ({"scenarios": "bad\u0000glob"}, "pattern"),
        ({"colour": "blue"}, "Extra inputs"),
    ],
)
def test_bad_submissions_get_422_with_a_clear_message(client: TestClient, body, message) -> None:
    response = client.post("/api/runs", json=body, headers=AUTH)
    assert response.status_code == 422
    assert message in json.dumps(response.json())


def test_repositories_outside_the_allow_list_are_refused(settings: Settings) -> None:
    with client_for(settings, allowed_repos=["acme/*"]) as limited:
        assert limited.post("/api/runs", json={"repo": "acme/kernels"}, headers=AUTH).status_code == 201
        refused = limited.post("/api/runs", json={"repo": "evil/kernels"}, headers=AUTH)
        assert refused.status_code == 403 and "GRADCI_ALLOWED_REPOS" in refused.json()["detail"]


def test_a_broker_that_is_down_gives_503_and_an_errored_run(settings: Settings) -> None:
    with client_for(settings, broker_url=UNREACHABLE_REDIS) as no_broker:
        response = no_broker.post("/api/runs", json={}, headers=AUTH)
    assert response.status_code == 503 and "could not queue gradci.plan_run for run" in response.json()["detail"]
    with session_scope(settings.database_url) as session:
        (run,) = session.query(Run).all()
        assert run.status == "error" and "could not queue" in run.error_message


# --- reading runs -------------------------------------------------------------------------------


def test_run_shows_counts_per_status_jobs_and_live_coverage(client, settings, cell_factory) -> None:
    url = settings.database_url
    run_id = seed_run(url, [cell_factory(i) for i in range(16)], jobs=("queued", "running", "running", "done"))
    run = client.get(f"/api/runs/{run_id}").json()
    assert run["counts"] == {"pass": 6, "fail": 2, "error": 2, "skip": 2, "xfail": 2, "xpass": 2, "queued": 1, "running": 2}
    assert run["coverage"] == pytest.approx(60.0)
    with session_scope(url) as session:
        session.get(Run, run_id).coverage = 42.0  # finalize_run's figure wins once stored
    assert client.get(f"/api/runs/{run_id}").json()["coverage"] == 42.0


def test_unknown_runs_are_404_and_malformed_ids_422(client: TestClient) -> None:
    for path in ("/api/runs/999", "/api/runs/999/results", "/api/runs/999/junit.xml"):
        response = client.get(path)
        assert response.status_code == 404 and response.json()["detail"] == "run 999 not found"
    assert client.post("/api/runs/999/cancel", headers=AUTH).status_code == 404
    assert client.post("/api/runs/999/rerun", headers=AUTH).status_code == 404
    assert client.get("/api/runs/abc").status_code == 422
    assert client.get("/api/runs/0").status_code == 422
    assert client.get(f"/api/runs/{2**40}").status_code == 422


def test_list_runs_filters_and_pages(client, settings, make_run) -> None:
    url = settings.database_url
    with session_scope(url) as session:
        repo = get_or_create_repository(session, "https://github.com/acme/k.git", "acme/k")
        for index in range(7):
            create_run(session, repository=repo if index % 2 else None, head_sha="f" * 40 if index % 2 else None,
                       pr_number=5 if index == 3 else None)
    everything = client.get("/api/runs").json()
    assert [run["id"] for run in everything["items"]] == [7, 6, 5, 4, 3, 2, 1] and everything["next_cursor"] is None
    assert [r["id"] for r in client.get("/api/runs", params={"repo": "acme/k"}).json()["items"]] == [6, 4, 2]
    assert [r["id"] for r in client.get("/api/runs", params={"sha": "ffff"}).json()["items"]] == [6, 4, 2]
    assert [r["id"] for r in client.get("/api/runs", params={"pr": 5}).json()["items"]] == [4]
    assert client.get("/api/runs", params={"status": "passed"}).json()["items"] == []

    seen, cursor = [], None
    while True:
        page = client.get("/api/runs", params={"limit": 3, **({"cursor": cursor} if cursor else {})}).json()
        seen += [run["id"] for run in page["items"]]
        if (cursor := page["next_cursor"]) is None:
            break
    assert seen == [7, 6, 5, 4, 3, 2, 1]

    assert client.get("/api/runs", params={"cursor": "garbage"}).status_code == 422  # not a cursor's form
    assert client.get("/api/runs", params={"cursor": "1"}).json()["items"] == []  # past the oldest run
    assert client.get("/api/runs", params={"status": "sleepy"}).status_code == 422
    assert client.get("/api/runs", params={"sha": "xyz"}).status_code == 422
    assert client.get("/api/runs", params={"limit": 0}).status_code == 422
    assert client.get("/api/runs", params={"pr": 2**40}).status_code == 422
    assert client.get("/api/runs", params={"repo": "a\u0000b"}).status_code == 422


def test_results_filter_and_every_row_comes_back_once(client, settings, cell_factory) -> None:
    cells = [cell_factory(i, backend=backend) for i in range(60) for backend in ("jax-rev", "torch-rev")]
    run_id = seed_run(settings.database_url, cells)
    seen, cursor = [], None
    while True:
        params = {"limit": 13, **({"cursor": cursor} if cursor else {})}
        page = client.get(f"/api/runs/{run_id}/results", params=params).json()
        seen += [(item["scenario"], item["backend"]) for item in page["items"]]
        if (cursor := page["next_cursor"]) is None:
            break
    assert len(seen) == len(set(seen)) == 120

    def items(**params):
        return client.get(f"/api/runs/{run_id}/results", params={"limit": 1000, **params}).json()["items"]

    assert len(items(status="fail")) == 16
    assert len(items(status="pass", backend="torch-rev")) == 24
    assert len(items(scenario="scenario_0000?", device="cpu", dtype="float64")) == 20
    first = items(scenario="scenario_00003", backend="jax-rev")[0]
    assert first["status"] == "fail" and first["message"].startswith("cell 3") and first["atol"] == 1e-8
    assert client.get(f"/api/runs/{run_id}/results", params={"status": "bad"}).status_code == 422
    assert client.get(f"/api/runs/{run_id}/results", params={"cursor": "!!"}).status_code == 422
    assert client.get(f"/api/runs/{run_id}/results", params={"limit": 5000}).status_code == 422


def test_an_invalid_report_table_is_a_422_naming_it_like_any_invalid_field(client, settings, cell_factory) -> None:
    run_id = seed_run(settings.database_url, [cell_factory(i) for i in range(4)])
    with session_scope(settings.database_url) as session:
        session.get(Run, run_id).config = {"report": {"project": {"target": "high"}}}
    response = client.get(f"/api/runs/{run_id}/report")
    assert response.status_code == 422
    (problem,) = response.json()["detail"]  # the documented validation-error shape, not a bare string
    assert problem["loc"] == ["gradci.toml", "report"] and "target must be 'auto' or a percentage" in problem["msg"]


def test_junit_has_a_suite_per_matrix_cell_and_junit_outcomes(client, settings, cell_factory) -> None:
    cells = [cell_factory(i, dtype=dtype) for i in range(8) for dtype in ("float32", "float64")]
    cells[0]["message"] = "bad \x01 control character"
    run_id = seed_run(settings.database_url, cells)
    response = client.get(f"/api/runs/{run_id}/junit.xml")
    assert response.status_code == 200 and response.headers["content-type"].startswith("application/xml")
    root = ET.fromstring(response.content)
    assert root.tag == "testsuites"
    assert (root.get("tests"), root.get("failures"), root.get("errors"), root.get("skipped")) == ("16", "4", "2", "4")
    suites = root.findall("testsuite")
    assert [suite.get("name") for suite in suites] == ["jax-rev.cpu.float32", "jax-rev.cpu.float64"]
    cases = {case.get("name"): case for case in suites[0].findall("testcase")}
    assert len(cases) == 8
    assert cases["scenario_00003"].find("failure").get("type") == "fail"
    assert cases["scenario_00007"].find("failure").get("message").startswith("unexpectedly passed")
    assert cases["scenario_00004"].find("error") is not None
    assert cases["scenario_00005"].find("skipped") is not None and cases["scenario_00006"].find("skipped") is not None
    assert list(cases["scenario_00000"]) == []


def test_a_finished_runs_junit_is_stored_gzipped_and_reads_as_the_live_document(client, settings,
                                                                                cell_factory) -> None:
    """Rendered once when the run is finalised: sent as it is (Content-Encoding: gzip) to a client that
    accepts gzip, inflated for one that does not; either way the very document a running run streams."""
    cells = [cell_factory(i, dtype=dtype) for i in range(40) for dtype in ("float32", "float64")]
    cells[0]["time_ms"] = None  # not timed (no timings asked for): its one call, 20 ms, is its time
    run_id = seed_run(settings.database_url, cells)
    live = client.get(f"/api/runs/{run_id}/junit.xml", headers={"Accept-Encoding": "identity"})
    assert "content-encoding" not in live.headers  # not final yet: streamed from the cells
    with session_scope(settings.database_url) as session:
        run = session.get(Run, run_id)
        run.status = RunStatus.failed.value
        store_report(session, run)
    # A cell stored after the rendering (a final run never gets one) is not in what is served: the
    # stored document is sent, not a second rendering.
    seed_cells(settings.database_url, run_id, [cell_factory(99)])
    raw = client.get(f"/api/runs/{run_id}/junit.xml", headers={"Accept-Encoding": "gzip"})
    assert raw.headers["content-encoding"] == "gzip" and raw.headers["vary"] == "Accept-Encoding"
    assert raw.content == live.content  # httpx inflates what came gzipped
    assert int(raw.headers["content-length"]) < len(live.content) / 5
    plain = client.get(f"/api/runs/{run_id}/junit.xml", headers={"Accept-Encoding": "gzip;q=0, identity"})
    assert "content-encoding" not in plain.headers and plain.content == live.content
    first = ET.fromstring(live.content).find("testsuite/testcase[@name='scenario_00000']")
    assert first is not None and first.get("time") == "0.020000"


@pytest.mark.parametrize(("header", "gzip"), [("gzip", True), ("gzip, deflate, br", True), ("*", True),
                                              ("gzip;q=0", False), ("identity", False), ("", False),
                                              ("br;q=1, gzip;q=0.5", True), ("gzip;q=nope", False)])
def test_accept_encoding(header, gzip) -> None:
    assert accepts_gzip(header) is gzip


# --- cancel and rerun ---------------------------------------------------------------------------


def test_cancel_drops_queued_jobs_and_reports_the_run(client, settings) -> None:
    url = settings.database_url
    idle = seed_run(url, [], jobs=("queued", "queued"))
    busy = seed_run(url, [], jobs=("queued", "running"))
    cancelled = client.post(f"/api/runs/{idle}/cancel", headers=AUTH).json()
    assert cancelled["status"] == "cancelled" and cancelled["cancel_requested"] and cancelled["counts"]["queued"] == 0
    still_running = client.post(f"/api/runs/{busy}/cancel", headers=AUTH).json()
    assert still_running["status"] == "queued" and still_running["cancel_requested"]
    assert still_running["counts"]["running"] == 1 and still_running["counts"]["queued"] == 0
    assert client.post(f"/api/runs/{idle}/cancel", headers=AUTH).status_code == 200
    with session_scope(url) as session:
        session.get(Run, busy).status = "passed"
    conflict = client.post(f"/api/runs/{busy}/cancel", headers=AUTH)
    assert conflict.status_code == 409 and "already finished (passed)" in conflict.json()["detail"]


def test_rerun_queues_a_child_run_over_the_unsuccessful_cells(client, settings, cell_factory) -> None:
    url = settings.database_url
    with session_scope(url) as session:
        repo = get_or_create_repository(session, "/srv/git/k")
    parent = seed_run(url, [cell_factory(i) for i in range(6)], repository=repo, head_sha="e" * 40)
    response = client.post(f"/api/runs/{parent}/rerun", headers=AUTH)
    assert response.status_code == 201
    child = client.get(f"/api/runs/{response.json()['id']}").json()
    assert (child["parent_run_id"], child["trigger"], child["repo"], child["head_sha"]) == (parent, "rerun", "/srv/git/k", "e" * 40)
    assert child["matrix"]["scenarios"] == [exact_pattern("scenario_00003"), exact_pattern("scenario_00004")]
    assert queued_tasks(settings.broker_url) == [("gradci.plan_run", [child["id"]])]

    clean = seed_run(url, [cell_factory(0), cell_factory(5)])
    nothing = client.post(f"/api/runs/{clean}/rerun", headers=AUTH)
    assert nothing.status_code == 409 and "no failed or errored cells" in nothing.json()["detail"]


# --- workers, health, metrics -------------------------------------------------------------------


def add_workers(url: str) -> None:
    with session_scope(url) as session:
        record_heartbeat(session, name="cpu-1", host="box", device="cpu", queue="cpu", versions={"jax": "0.4.35"})
        record_heartbeat(session, name="gpu-0", host="box", device="cuda:0", queue="cuda", versions={})
        record_heartbeat(session, name="gpu-1", host="box", device="cuda:1", queue="cuda", versions={})
    with session_scope(url) as session:
        session.get(Worker, "gpu-1").last_heartbeat = utcnow() - timedelta(seconds=120)


def test_workers_report_online_by_recent_heartbeat(client, settings) -> None:
    add_workers(settings.database_url)
    workers = {worker["name"]: worker for worker in client.get("/api/workers").json()}
    assert {name: worker["online"] for name, worker in workers.items()} == {"cpu-1": True, "gpu-0": True, "gpu-1": False}
    assert workers["cpu-1"]["versions"] == {"jax": "0.4.35"}


def test_health_reports_database_broker_and_workers(client, settings) -> None:
    add_workers(settings.database_url)
    response = client.get("/api/health")
    assert response.status_code == 200
    assert response.json() == {
        "status": "ok",
        "database": {"ok": True, "error": None},
        "broker": {"ok": True, "error": None, "queued_plans": 0},
        "workers_online": {"cpu": 1, "cuda:0": 1},
    }


def test_health_is_503_when_the_broker_or_the_database_is_down(settings: Settings) -> None:
    with client_for(settings, broker_url=UNREACHABLE_REDIS) as no_broker:
        response = no_broker.get("/api/health")
    assert response.status_code == 503
    assert response.json()["status"] == "unavailable" and response.json()["database"]["ok"]
    assert not response.json()["broker"]["ok"] and response.json()["broker"]["error"]

    with client_for(settings, database_url=UNREACHABLE_POSTGRES) as no_database:
        response = no_database.get("/api/health")
        assert response.status_code == 503 and not response.json()["database"]["ok"]
        # Other endpoints answer 503 too, never 500.
        listing = no_database.get("/api/runs")
        assert listing.status_code == 503 and "database unavailable" in listing.json()["detail"]
        metrics = no_database.get("/metrics")
        assert metrics.status_code == 200 and "gradci_database_up 0.0" in metrics.text


def test_metrics_count_runs_results_and_workers(client, settings, cell_factory) -> None:
    url = settings.database_url
    seed_run(url, [cell_factory(i) for i in range(8)])
    add_workers(url)
    response = client.get("/metrics")
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/plain")
    lines = set(response.text.splitlines())
    for expected in (
        "gradci_database_up 1.0",
        'gradci_runs{status="queued"} 1.0',
        'gradci_runs{status="passed"} 0.0',
        'gradci_results{status="pass"} 3.0',
        'gradci_results{status="xpass"} 1.0',
        'gradci_workers_online{device="cpu"} 1.0',
        'gradci_workers_online{device="cuda:0"} 1.0',
    ):
        assert expected in lines


def test_openapi_documents_every_route(client: TestClient) -> None:
    assert client.get("/docs").status_code == 200
    paths = client.get("/openapi.json").json()["paths"]
    for path in ("/api/runs", "/api/runs/{run_id}", "/api/runs/{run_id}/results", "/api/runs/{run_id}/junit.xml",
                 "/api/runs/{run_id}/cancel", "/api/runs/{run_id}/rerun", "/api/workers", "/api/health", "/metrics"):
        assert path in paths


# --- the embedded mode: SQLite and the server-less transport --------------------------------------

CONSUMER = textwrap.dedent(
    """
    import json, sys
    from kombu import Connection
    with Connection(sys.argv[1], transport_options={"connect_args": {"timeout": 30}}) as connection:
        queue = connection.SimpleQueue("cpu")
        message = queue.get(timeout=20)
        print(json.dumps({"task": message.headers["task"], "args": message.payload[0]}))
        message.ack()
    """
)


def test_embedded_mode_queues_runs_another_process_can_take(clean_environment, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    settings = Settings(api_token=TOKEN)  # no URLs: SQLite database and SQLite transport under .gradci/
    from gradci.services.db.migrate import upgrade

    upgrade(settings.database_url)
    with TestClient(create_app(settings)) as embedded:
        run_id = embedded.post("/api/runs", json={"dtypes": ["float64"]}, headers=AUTH).json()["id"]
        assert embedded.get("/api/health").json()["broker"] == {"ok": True, "error": None, "queued_plans": 1}
        assert embedded.get(f"/api/runs/{run_id}").json()["status"] == "queued"
    consumer = subprocess.run([sys.executable, "-c", CONSUMER, settings.broker_url], cwd=REPO_ROOT,
                              capture_output=True, text=True, timeout=60)
    assert consumer.returncode == 0, consumer.stderr
    assert json.loads(consumer.stdout) == {"task": "gradci.plan_run", "args": [run_id]}
    assert (tmp_path / ".gradci" / "gradci.db").exists() and (tmp_path / ".gradci" / "broker.db").exists()


def test_the_embedded_broker_is_polled_ten_times_a_second_by_workers_and_senders(clean_environment, tmp_path,
                                                                                monkeypatch) -> None:
    """kombu's SQLAlchemy transport sleeps a second whenever its queues are empty: each message to an
    idle worker waited up to that long. A Redis broker is left as kombu makes it."""
    from gradci.services.broker.dispatch import broker_connection
    from gradci.services.broker.embedded import POLLING_INTERVAL_S
    from gradci.services.broker.queues import create_celery

    monkeypatch.chdir(tmp_path)
    embedded = Settings()
    assert POLLING_INTERVAL_S <= 0.1
    for connection in (create_celery(embedded).connection_for_read(), broker_connection(embedded)):
        with connection:
            assert (connection.transport.driver_type, connection.transport.polling_interval) == ("sql", POLLING_INTERVAL_S)
    with broker_connection(Settings(broker_url="redis://127.0.0.1:1/0")) as connection:
        assert connection.transport.driver_type == "redis"


# --- a real server ------------------------------------------------------------------------------


@pytest.fixture
def api_server(clean_environment, postgres_url: str, redis_url: str, tmp_path: Path) -> Iterator[str]:
    """``gradci api`` (uvicorn) configured only through GRADCI_* variables; its URL."""
    env = service_env(database_url=postgres_url, broker_url=redis_url, api_token=TOKEN, read_access="local",
                      public_url="https://ci.example.org", workdir=str(tmp_path / "work"))
    with serving_api(env, tmp_path, timeout_s=30) as served:
        yield served.url


def test_through_gradci_api_over_loopback_http(api_server: str, redis_url: str) -> None:
    with httpx.Client(base_url=api_server, timeout=10) as http:
        assert http.post("/api/runs", json={}).status_code == 401
        created = http.post("/api/runs", json={"repo": "acme/kernels", "sha": "1" * 40}, headers=AUTH)
        assert created.status_code == 201
        run_id = created.json()["id"]
        assert created.json()["url"] == f"https://ci.example.org/runs/{run_id}"
        run = http.get(f"/api/runs/{run_id}").json()
        assert run["repo"] == "https://github.com/acme/kernels.git" and run["status"] == "queued"
        assert http.get("/api/runs", params={"repo": "acme/kernels"}).json()["items"][0]["id"] == run_id
        assert http.get("/api/runs/12345").status_code == 404
        assert 'gradci_runs{status="queued"} 1.0' in http.get("/metrics").text
        assert http.post(f"/api/runs/{run_id}/cancel", headers=AUTH).json()["status"] == "cancelled"
    assert queued_tasks(redis_url) == [("gradci.plan_run", [run_id])]
