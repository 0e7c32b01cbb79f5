"""The dashboard's pages, server-side, on real databases: the run page (headline, heatmap, filters,
bounded pages, failures first, the live JSON), the cell page, the scenario history, compare, the
runs and workers pages, the badge and the locally served plotly.js. The browser tests drive the same
pages in Chromium (tests/web/test_browser.py)."""
from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from gradci.services.db.models import Job, Result, Run
from gradci.services.db.results import upsert_results
from gradci.services.db.runs import create_run, get_or_create_repository
from gradci.services.db.session import session_scope
from gradci.services.db.workers import record_heartbeat
from gradci.services.reports import run_grid as matrix_module
from gradci.services.reports.diff import stored_tolerance_ratio, tolerance_ratio
from gradci.services.reports.run_grid import ROWS_PER_PAGE
from gradci.services.settings import Settings
from gradci.web import heatmap
from gradci.web.app import create_app
from gradci.web.run_page import CELLS_PER_PAGE
from gradci.web.status_style import BAND_COLOURS

Cells = Callable[..., dict[str, Any]]


@pytest.fixture
def client(database_url: str, tmp_path: Any, clean_environment: None) -> Iterator[TestClient]:
    # Who may read is tests/services/test_read_access.py's: here the reader is gradci up's local user,
    # who sees everything (read_access "local", requests to a loopback address).
    settings = Settings(database_url=database_url, workdir=tmp_path / "work", read_access="local")
    with TestClient(create_app(settings), base_url="http://127.0.0.1") as test_client:
        yield test_client


def make_run(url: str, cells: list[dict[str, Any]], *, status: str = "failed", **fields: Any) -> int:
    with session_scope(url) as session:
        run = create_run(session, **fields)
        run.status = status
        upsert_results(session, run.id, cells)
        return run.id


def cell(cell_factory: Cells, index: int, scenario: str, status: str, ratio: float = 0.01,
         **axes: Any) -> dict[str, Any]:
    """A cell of ``scenario`` that used ``ratio`` of its (absolute and relative) tolerance."""
    made = cell_factory(index, status=status, **axes)
    made.update(scenario=scenario, max_abs_err=ratio * made["atol"], max_rel_err=ratio * made["rtol"])
    return made


def embedded_figure(html: str, div: str) -> dict[str, Any]:
    found = re.search(rf'<script type="application/json" data-chart="{div}">(.*?)</script>', html, re.S)
    assert found, f"no figure for #{div}"
    return json.loads(found.group(1))


def table_statuses(html: str) -> list[str]:
    return re.findall(r'<td><a href="/runs/\d+/cells/\d+"><span class="status s-(\w+)">', html)


# --- the run page ---------------------------------------------------------------------------------


def test_run_page_heatmap_groups_families_failures_first(database_url: str, client: TestClient,
                                                        cell_factory: Cells) -> None:
    cells = [cell(cell_factory, 0, "alpha/ok", "pass"), cell(cell_factory, 1, "alpha/near", "pass", ratio=0.9),
             cell(cell_factory, 2, "beta/ok", "pass"), cell(cell_factory, 3, "beta/broken", "fail", ratio=30),
             cell(cell_factory, 4, "beta/ok", "error", backend="torch-rev"),
             cell(cell_factory, 5, "gamma/skipped", "skip")]
    run_id = make_run(database_url, cells, head_sha="a" * 40)
    page = client.get(f"/runs/{run_id}")
    assert page.status_code == 200
    trace = embedded_figure(page.text, "heatmap")["data"][0]
    # Families with the worst cell first (beta has a failure); within one, the worst scenario first.
    assert trace["y"] == [["beta", "beta", "alpha", "alpha", "gamma"], ["broken", "ok", "near", "ok", "skipped"]]
    assert trace["x"] == ["jax-rev · cpu · float64", "torch-rev · cpu · float64"]
    with session_scope(database_url, readonly=True) as session:
        ids = {(r.scenario, r.backend): r.id for r in session.scalars(select(Result).where(Result.run_id == run_id))}
    assert trace["customdata"][1] == [ids["beta/ok", "jax-rev"], ids["beta/ok", "torch-rev"]]  # a click opens it
    assert trace["customdata"][0][1] is None and trace["z"][0][1] is None  # no such cell: a gap
    assert embedded_figure(page.text, "heatmap")["layout"]["meta"]["link"] == f"/runs/{run_id}/cells/%s"
    bands = list(BAND_COLOURS)
    band_of = {status: bands.index(status) for status in bands}
    assert int(trace["z"][0][0]) == band_of["fail"] and int(trace["z"][1][1]) == band_of["error"]
    near, plain = trace["z"][2][0], trace["z"][3][0]
    assert int(near) == int(plain) == band_of["pass"]
    pass_stops = [position for position, _ in BAND_COLOURS["pass"]]
    assert near % 1 > pass_stops[-2] and plain % 1 < pass_stops[1]  # the near miss turns amber, the rest green
    # Readable without colour: the hover and the table say the status in words beside an icon, ...
    assert trace["hovertext"][0][0] == "✘ fail 30" and "✔ pass" in trace["hovertext"][2][0]
    # Each cell but a pass shows its status's icon (in grey a fail and an error look alike); a gap none.
    assert trace["text"][:2] == [["✘", ""], ["", "⚠"]] and trace["texttemplate"] == "%{text}"
    assert table_statuses(page.text)[:2] == ["fail", "error"]  # the table lists failures first too
    assert 'src="/static/plotly.min.js?v=' in page.text and "cdn" not in page.text.lower()


def test_run_page_filters_server_side(database_url: str, client: TestClient, cell_factory: Cells) -> None:
    kinds = [("nn", "pass", "float64"), ("nn", "fail", "float32"), ("linalg", "fail", "float64"),
             ("linalg", "pass", "float32")]
    cells = [cell(cell_factory, i, f"{family}/s{i}", status, dtype=dtype)
             for i, (family, status, dtype) in enumerate(kinds)]
    run_id = make_run(database_url, cells)

    def figure_rows(query: str) -> list[str]:
        return embedded_figure(client.get(f"/runs/{run_id}?{query}").text, "heatmap")["data"][0]["y"][1]

    assert sorted(figure_rows("family=nn")) == ["s0", "s1"]
    assert sorted(figure_rows("status=fail")) == ["s1", "s2"]
    assert figure_rows("family=nn&status=fail&dtype=float32") == ["s1"]
    assert figure_rows("family=&status=&dtype=") != []  # a form's "any" is no filter
    page = client.get(f"/runs/{run_id}?status=fail")
    assert set(table_statuses(page.text)) == {"fail"} and "s0" not in page.text.split('id="cells"')[1]
    assert client.get(f"/runs/{run_id}?status=bogus").status_code == 422


def test_run_page_ships_a_bounded_page_however_big_the_run(database_url: str, client: TestClient,
                                                           cell_factory: Cells) -> None:
    scenarios = ROWS_PER_PAGE + 5
    cells = [cell(cell_factory, i, f"fam/s{i:03d}", "fail" if i % 3 == 0 else "pass") for i in range(scenarios)]
    run_id = make_run(database_url, cells)
    first = client.get(f"/runs/{run_id}")
    rows = embedded_figure(first.text, "heatmap")["data"][0]["y"][1]
    assert len(rows) == ROWS_PER_PAGE and re.search(r"page 1 of <span id=\"matrix-pages\">2</span>", first.text)
    assert len(table_statuses(first.text)) == CELLS_PER_PAGE
    assert set(table_statuses(first.text)[:(scenarios + 2) // 3]) == {"fail"}
    following = re.search(r'href="(\?cursor=[^"#]+)#cells"', first.text).group(1)
    second = client.get(f"/runs/{run_id}{following}")
    assert len(table_statuses(second.text)) == CELLS_PER_PAGE
    rest = embedded_figure(client.get(f"/runs/{run_id}?page=2").text, "heatmap")["data"][0]["y"][1]
    assert len(rest) == 5 and set(rows) | set(rest) == {f"s{i:03d}" for i in range(scenarios)}
    assert embedded_figure(client.get(f"/runs/{run_id}?page=3").text, "heatmap")["data"][0]["y"] == [[], []]


def test_live_json_follows_a_running_run(database_url: str, client: TestClient, cell_factory: Cells) -> None:
    run_id = make_run(database_url, [cell(cell_factory, 0, "a/one", "pass")], status="running")
    with session_scope(database_url) as session:
        session.add_all([Job(run_id=run_id, backend="jax-rev", device="cpu", queue="cpu", status=status)
                         for status in ("done", "running", "queued")])
    first = client.get(f"/runs/{run_id}/live.json").json()
    assert first["live"] and first["counts"]["pass"] == 1 and first["jobs"] == {"over": 1, "total": 3}
    assert 'data-live="true"' in client.get(f"/runs/{run_id}").text
    with session_scope(database_url) as session:
        upsert_results(session, run_id, [cell(cell_factory, 1, "a/two", "fail")])
        session.get(Run, run_id).status = "failed"
    later = client.get(f"/runs/{run_id}/live.json?status=fail").json()
    assert later["counts"]["fail"] == 1 and not later["live"] and later["status"] == "failed"
    assert later["coverage"] == "50.00%" and later["matrix"] == {"rows": 1, "page": 1, "pages": 1}
    assert later["figure"]["data"][0]["y"] == [["a"], ["two"]]
    assert client.get("/runs/999/live.json").status_code == 404


def test_live_poll_is_cheap_while_nothing_changed(database_url: str, client: TestClient, cell_factory: Cells,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """A poll that sends the token it last saw is told "unchanged" without a heatmap; polls of the same
    state (two tabs, the page itself) share one layout; a new cell, or a cell that changed status,
    moves the token and the layout is worked out again."""
    computed: list[int] = []
    real = matrix_module._computed_layout

    def counted(session: Any, run_id: int, where: Any) -> Any:
        computed.append(run_id)
        return real(session, run_id, where)

    monkeypatch.setattr(matrix_module, "_computed_layout", counted)
    run_id = make_run(database_url, [cell(cell_factory, 0, "a/one", "pass")], status="running")
    page = client.get(f"/runs/{run_id}").text
    token = re.search(r'data-token="(\w+)"', page).group(1)
    assert client.get(f"/runs/{run_id}/live.json?since={token}").json() == {"token": token, "unchanged": True}
    tabs = [client.get(f"/runs/{run_id}/live.json").json() for _ in range(2)]
    assert [state["token"] for state in tabs] == [token, token] and len(computed) == 1  # the page's layout, shared
    with session_scope(database_url) as session:
        upsert_results(session, run_id, [cell(cell_factory, 1, "a/two", "fail")])
    moved = client.get(f"/runs/{run_id}/live.json?since={token}").json()
    assert moved["token"] != token and moved["figure"]["data"][0]["y"] == [["a", "a"], ["two", "one"]]
    assert len(computed) == 2
    with session_scope(database_url) as session:  # a redelivery rewrites a cell: same ids, another status
        upsert_results(session, run_id, [cell(cell_factory, 1, "a/two", "pass")])
    again = client.get(f"/runs/{run_id}/live.json?since={moved['token']}").json()
    assert again["token"] != moved["token"] and again["counts"]["fail"] == 0 and len(computed) == 3
    assert again["figure"]["data"][0]["y"] == [["a", "a"], ["one", "two"]]  # no failure first any more


def test_agreement_cells_have_their_own_column_filter_and_page(database_url: str, client: TestClient,
                                                               cell_factory: Cells) -> None:
    """CPU–GPU agreement cells carry a device such as "cuda:0-vs-cpu": a column of their own, a choice
    of the device filter, and a link to their cell page."""
    agreement = "cuda:0-vs-cpu"
    cells = [cell(cell_factory, 0, "nn/mlp", "pass", device="cpu", dtype="float32"),
             cell(cell_factory, 1, "nn/mlp", "pass", device="cuda:0", dtype="float32"),
             cell(cell_factory, 2, "nn/mlp", "fail", device=agreement, dtype="float32", ratio=3.0)]
    run_id = make_run(database_url, cells)
    page = client.get(f"/runs/{run_id}").text
    trace = embedded_figure(page, "heatmap")["data"][0]
    column = f"jax-rev · {agreement} · float32"
    assert trace["x"] == ["jax-rev · cpu · float32", "jax-rev · cuda:0 · float32", column]  # beside its GPU
    assert f"<option>{agreement}</option>" in page
    filtered = client.get(f"/runs/{run_id}", params={"device": agreement})
    assert f"<option selected>{agreement}</option>" in filtered.text
    trace = embedded_figure(filtered.text, "heatmap")["data"][0]
    assert trace["x"] == [column] and trace["hovertext"] == [["✘ fail 3"]]
    cell_page = client.get(f"/runs/{run_id}/cells/{trace['customdata'][0][0]}")
    assert cell_page.status_code == 200 and f"· {agreement} ·" in cell_page.text
    live = client.get(f"/runs/{run_id}/live.json", params={"device": agreement}).json()
    assert live["figure"]["data"][0]["x"] == [column]
    history = history_data(client.get("/scenarios/nn/mlp").text)["data"]
    assert column in history["series"]


# --- cell, history, compare -----------------------------------------------------------------------


GPU_RECORD = {"device": "cuda:0", "kind": "cuda", "name": "NVIDIA H100 80GB HBM3", "capability": "90",
              "memory_total": 85_899_345_920, "memory_free": 80_000_000_000, "driver": "550.54.15", "cuda": "12.4",
              "source": "simulated", "frameworks": {"torch": "2.13.0", "jax": "0.10.2", "jaxlib": None}}


def history_data(html: str) -> dict[str, Any]:
    found = re.search(r'<script type="application/json" id="history-data">(.*?)</script>', html, re.S)
    assert found, "no history data"
    return json.loads(found.group(1))


def repository_of(url: str, run_id: int) -> int:
    with session_scope(url, readonly=True) as session:
        return session.get(Run, run_id).repository_id


def base_and_head(url: str, cells: Cells, *, head: dict[str, Any], device_record: dict[str, Any] | None
                  ) -> tuple[int, int, int, int]:
    """A passing base run and a head run of ``head`` (one cell of nn/mlp) computed by a job of
    cpu-1@box with ``device_record``: (base run, base cell, head run, head cell)."""
    with session_scope(url) as session:
        repository = get_or_create_repository(session, "https://github.com/o/r.git", "o/r")
        base = create_run(session, repository=repository, head_sha="b" * 40)
        base.status = "passed"
        upsert_results(session, base.id, [cell(cells, 3, "nn/mlp", "pass", ratio=0.02)])
        run = create_run(session, repository=repository, head_sha="c" * 40, base_sha="b" * 40)
        run.status = "failed"
        job = Job(run_id=run.id, backend="jax-rev", device="cpu", queue="cpu", status="done", worker="cpu-1@box",
                  device_record=device_record)
        session.add(job)
        session.flush()
        upsert_results(session, run.id, [head], job_id=job.id)
        record_heartbeat(session, name="cpu-1@box", host="box", device="cpu", queue="cpu",
                         versions={"python": "3.11.7", "jax": "0.4.38"})
        base_id, head_id = base.id, run.id
    with session_scope(url, readonly=True) as session:
        base_cell, head_cell = (session.scalar(select(Result.id).where(Result.run_id == r)) for r in (base_id, head_id))
    return base_id, base_cell, head_id, head_cell


def table_row(html: str, label: str) -> str:
    found = re.search(rf"<tr><th>{re.escape(label)}</th><td>(.*?)</td></tr>", html, re.S)
    assert found, f"no row {label!r}"
    return re.sub(r"<[^>]+>|\s+", " ", found.group(1)).strip()


def test_cell_page_shows_reference_precision_repeats_and_device(database_url: str, client: TestClient,
                                                                cell_factory: Cells) -> None:
    head = {**cell(cell_factory, 3, "nn/mlp", "fail", ratio=4.0), "reference": "finite differences, 6 probes",
            "reference_error": 2.5e-11, "precision": "torch tf32 matmul=off cudnn=on", "repeat_spread": 0.0}
    base_id, base_cell, head_id, head_cell = base_and_head(database_url, cell_factory, head=head,
                                                           device_record=GPU_RECORD)
    page = client.get(f"/runs/{head_id}/cells/{head_cell}")
    assert page.status_code == 200
    text = page.text
    assert "✘ fail" in text and "max abs error above tolerance" in text
    assert ">4<" in text.replace(" ", "")  # error ÷ tolerance, in the table
    history = f'href="/scenarios/nn/mlp?repository={repository_of(database_url, head_id)}"'  # its repository's
    assert f'href="/runs/{base_id}/cells/{base_cell}"' in text and history in text
    assert table_row(text, "reference") == "finite differences, 6 probes"
    assert table_row(text, "its error estimate").startswith("2.5e-11")
    assert table_row(text, "precision") == "torch tf32 matmul=off cudnn=on"
    assert table_row(text, "repeats").startswith("bitwise reproducible")
    # The device record of the job that computed it, not the worker's versions of today.
    assert table_row(text, "model") == "NVIDIA H100 80GB HBM3" and table_row(text, "compute capability") == "9.0"
    assert table_row(text, "NVIDIA driver") == "550.54.15" and table_row(text, "CUDA (driver)") == "12.4"
    assert table_row(text, "torch") == "2.13.0" and table_row(text, "jax") == "0.10.2"
    assert table_row(text, "jaxlib") == "not installed" and "0.4.38" not in text
    assert table_row(text, "worker").startswith("cpu-1@box on box")
    assert client.get(f"/runs/{base_id}/cells/{head_cell}").status_code == 404  # another run's cell


def test_cell_page_of_an_older_cell_says_not_recorded(database_url: str, client: TestClient,
                                                       cell_factory: Cells) -> None:
    """Cells stored before references, precision and device records were: the page says so."""
    head = {**cell(cell_factory, 3, "nn/mlp", "pass"), "repeat_spread": 3e-7}
    _, _, head_id, head_cell = base_and_head(database_url, cell_factory, head=head, device_record=None)
    text = client.get(f"/runs/{head_id}/cells/{head_cell}").text
    assert table_row(text, "reference") == "not recorded" and table_row(text, "its error estimate") == "not recorded"
    assert table_row(text, "precision") == "not recorded"
    assert table_row(text, "repeats") == "not bitwise reproducible: repeated results differed by up to 3e-07"
    assert table_row(text, "device record").startswith("not recorded")
    bare = make_run(database_url, [cell(cell_factory, 1, "nn/bare", "pass")])
    with session_scope(database_url, readonly=True) as session:
        bare_cell = session.scalar(select(Result.id).where(Result.run_id == bare))
    text = client.get(f"/runs/{bare}/cells/{bare_cell}").text
    assert table_row(text, "repeats") == "not repeated" and table_row(text, "worker") == "not recorded"


def test_history_charts_the_scenario_over_runs(database_url: str, client: TestClient, cell_factory: Cells) -> None:
    head = cell(cell_factory, 3, "nn/mlp", "fail", ratio=4.0)
    base_id, base_cell, head_id, head_cell = base_and_head(database_url, cell_factory, head=head, device_record=None)
    repository = repository_of(database_url, head_id)
    history = client.get(f"/scenarios/nn/mlp?repository={repository}")
    assert history.status_code == 200
    shipped = history_data(history.text)
    data = shipped["data"]
    assert data["runs"] == [base_id, head_id] and data["shas"] == ["b" * 7, "c" * 7]
    assert data["series"] == ["jax-rev · cpu · float64"] and data["cell"] == [[base_cell, head_cell]]
    assert data["tolerance_ratio"] == [[pytest.approx(0.02), pytest.approx(4.0)]]
    assert data["first_call_ms"] == [[20.0, 20.0]]
    assert [data["statuses"][int(z)] for z in data["z"][0]] == ["✔ pass", "✘ fail"]  # the heatmap's bands
    charts = {chart["id"]: chart for chart in shipped["charts"]}
    assert list(charts) == ["chart-status", "chart-tolerance_ratio", "chart-time_ms", "chart-first_call_ms"]
    assert not any(chart["empty"] for chart in charts.values())
    assert all(chart["layout"]["meta"]["link"] == "/runs/%s" for chart in charts.values())  # a click opens the cell
    assert 'src="/static/history.js"' in history.text
    assert client.get(f"/scenarios/nn/absent?repository={repository}").status_code == 404
    assert history_data(client.get(f"/scenarios/nn/mlp?runs=1&repository={repository}").text)["data"]["runs"] == [
        head_id]
    # Per repository: the built-in library's nn/mlp is another scenario, with a history of its own.
    assert client.get("/scenarios/nn/mlp").status_code == 404


def test_history_of_a_scenario_that_always_errored_says_so(database_url: str, client: TestClient,
                                                          cell_factory: Cells) -> None:
    errored = {**cell(cell_factory, 4, "bad/always", "error"), "max_abs_err": None, "max_rel_err": None}
    for _ in range(2):
        make_run(database_url, [errored])
    page = client.get("/scenarios/bad/always").text
    charts = {chart["id"]: chart["empty"] for chart in history_data(page)["charts"]}
    assert charts["chart-status"] is None  # the statuses always have something to show
    assert "no cell of these runs recorded errors" in charts["chart-tolerance_ratio"]
    # The page says it where the chart would be, and draws no empty chart there.
    assert re.search(r'<p id="chart-tolerance_ratio" class="placeholder empty-chart">.*no cell of these runs', page)
    assert '<div id="chart-tolerance_ratio"' not in page and '<div id="chart-time_ms"' in page


def test_compare_lists_changes_biggest_first(database_url: str, client: TestClient, cell_factory: Cells) -> None:
    before = [cell(cell_factory, 0, "f/same", "pass"), cell(cell_factory, 1, "f/broke", "pass"),
              cell(cell_factory, 2, "f/headroom", "pass", ratio=0.001), cell(cell_factory, 3, "f/slower", "pass"),
              cell(cell_factory, 4, "f/drift", "pass", ratio=0.001)]
    after = [dict(c) for c in before]
    after[1]["status"] = "fail"
    after[2].update(max_abs_err=0.5 * after[2]["atol"], max_rel_err=0.5 * after[2]["rtol"])  # 500×
    after[3]["time_ms"] = before[3]["time_ms"] * 3
    after[4].update(max_abs_err=0.0015 * after[4]["atol"], max_rel_err=0.0015 * after[4]["rtol"])  # 1.5×: noise
    first, second = make_run(database_url, before), make_run(database_url, after)
    page = client.get(f"/runs/{first}/compare/{second}")
    assert page.status_code == 200
    listed = re.findall(r'href="/scenarios/(f/\w+)"', page.text)
    assert listed == ["f/broke", "f/headroom", "f/slower"] and "<strong>3</strong> cells changed" in page.text
    assert client.get(f"/runs/{first}/compare/999").status_code == 404


def test_tolerance_ratio_in_python_matches_the_sql(database_url: str, cell_factory: Cells) -> None:
    cells = [cell_factory(i) for i in range(1, 9)]
    cells[0].update(max_abs_err=None)
    cells[1].update(max_abs_err=None, max_rel_err=None)
    cells[2].update(atol=0.0)
    run_id = make_run(database_url, cells)
    with session_scope(database_url, readonly=True) as session:
        rows = session.execute(select(Result, tolerance_ratio(Result)).where(Result.run_id == run_id)).all()
        assert [stored_tolerance_ratio(row) for row, _ in rows] == [pytest.approx(sql) for _, sql in rows]
        assert any(sql is None for _, sql in rows)


# --- runs, workers, badge, assets -----------------------------------------------------------------


def test_runs_page_filters_and_shows_change_against_base(database_url: str, client: TestClient,
                                                         cell_factory: Cells) -> None:
    with session_scope(database_url) as session:
        repository = get_or_create_repository(session, "https://github.com/o/r.git", "o/r")
        base = create_run(session, repository=repository, head_sha="b" * 40, trigger="push")
        base.status, base.coverage = "passed", 100.0
        head = create_run(session, repository=repository, head_sha="c" * 40, base_sha="b" * 40, pr_number=7,
                          trigger="webhook")
        head.status, head.coverage = "failed", 75.0
        other = create_run(session, head_sha="d" * 40)
        ids = base.id, head.id, other.id
    runs = lambda query="": re.findall(r'<td><a href="/runs/(\d+)">', client.get(f"/?{query}").text)
    assert runs() == [str(i) for i in reversed(ids)]
    assert runs("trigger=push") == [str(ids[0])] and runs("status=failed") == [str(ids[1])]
    assert runs("repo=o/r") == [str(ids[1]), str(ids[0])] and runs("repo=&status=&trigger=") == runs()
    assert "-25.00 pp" in client.get("/").text and "#7" in client.get("/").text


BOXED = {"sandbox": "bubblewrap", "version": "bubblewrap 0.8.0", "namespaces": ["user", "pid", "net"],
         "identity": "a fresh uid per runner", "limits": "cgroup v1", "pids_max": 256, "memory_limit_mb": None,
         "scratch_mb": 1024}


def test_workers_page_shows_devices_memory_queues_and_waiting_jobs(database_url: str, client: TestClient) -> None:
    with session_scope(database_url) as session:
        record_heartbeat(session, name="cuda-0@gpu", host="gpu", device="cuda:0", queue="cuda,cuda.sm90",
                         versions={"python": "3.11.7", "torch": "2.13.0", "device": GPU_RECORD,
                                   "rss_bytes": 3 * 2**30, "isolation": BOXED})
        record_heartbeat(session, name="cpu-1@box", host="box", device="cpu", queue="cpu",
                         versions={"isolation": {"sandbox": "none", "reason": "bubblewrap is not installed",
                                                 "repository_code": "refused"}})
        run = create_run(session)
        session.add_all([Job(run_id=run.id, backend="torch-rev", device="cuda:0", queue="cuda", status="running",
                             worker="cuda-0@gpu", scenarios=["a", "b"]),
                         *(Job(run_id=run.id, backend="fd", device="cpu", queue="cpu") for _ in range(3)),
                         *(Job(run_id=run.id, backend="torch-rev", device="cuda", queue="cuda.sm80") for _ in range(2))])
        session.flush()
        run_id = run.id
        unserved = [job.id for job in session.scalars(select(Job).where(Job.queue == "cuda.sm80"))]
    text = client.get("/workers").text
    assert "cuda-0@gpu" in text and "✔ online" in text and "torch 2.13.0" in text
    # Each worker's runner box, or why it has none and what it does with repository code.
    assert "✔ boxed" in text and "bubblewrap 0.8.0: user, pid, net namespaces; a fresh uid per runner" in text
    assert "256 processes, memory unbounded" in text and "by cgroup v1" in text
    assert "✘ unboxed" in text and "no box: bubblewrap is not installed; repository code refused" in text
    # The device record: the GPU in one line, its memory, and the frameworks it names beside the versions.
    assert "NVIDIA H100 80GB HBM3 · sm_90 · driver 550.54.15 · CUDA 12.4" in text
    assert "74.5 GiB free of 80.0 GiB" in text and "worker resident 3.0 GiB" in text
    assert "jax 0.10.2" in text and "jaxlib not installed" in text and "python 3.11.7" in text
    assert re.search(r"cpu-1@box.*?<span class=\"muted\">not reported</span>", text, re.S)  # no record
    assert f'href="/runs/{run_id}">run #{run_id}</a>' in text and "2 scenarios" in text
    # Every queue with its depth and its online consumers: cuda.sm80 has none, so its jobs wait.
    assert re.search(r"<td>cpu</td><td class=\"num\">3</td>\s*<td class=\"num\">1</td>", text)
    assert re.search(r"<td>cuda.sm90</td><td class=\"num\">0</td>\s*<td class=\"num\">1</td>", text)
    assert re.search(r"<td>cuda.sm80</td><td class=\"num\">2</td>\s*<td class=\"num\"><span[^>]*>✘ none", text)
    # The jobs waiting for a device, with the reason services.db.waiting gives (on the run page too).
    for page in (text, client.get(f"/runs/{run_id}").text):
        waiting = re.findall(r"<tr><td>(\d+)</td><td><a href=\"/runs/\d+\">#\d+</a></td>.*?</span> ([^<]+)</td>",
                             page.split('id="waiting"')[1], re.S)
        assert [int(job) for job, _ in waiting] == unserved
        assert all(reason.startswith("waiting for") and "online: cuda.sm90" in reason for _, reason in waiting)


def test_badge_shows_the_default_branch_coverage(database_url: str, client: TestClient) -> None:
    unknown = client.get("/badge/o/r.svg")
    assert unknown.status_code == 200 and unknown.headers["content-type"] == "image/svg+xml"
    assert ">unknown</text>" in unknown.text and "#9f9f9f" in unknown.text
    with session_scope(database_url) as session:
        repository = get_or_create_repository(session, "https://github.com/o/r.git", "o/r")
        for trigger, coverage in (("push", 91.25), ("webhook", 10.0)):  # a PR run is not the branch's coverage
            run = create_run(session, repository=repository, head_sha="e" * 40, trigger=trigger)
            run.status, run.coverage = "failed", coverage
    badge = client.get("/badge/o/r.svg")
    assert ">91.2%</text>" in badge.text and "#97ca00" in badge.text and "<title>gradient coverage: 91.2%" in badge.text
    assert badge.headers["cache-control"] == "no-cache"
    again = client.get("/badge/o/r.svg", headers={"If-None-Match": badge.headers["etag"]})
    assert again.status_code == 304 and not again.content
    assert client.get("/badge/o/r%3Cx.svg").status_code == 422


def test_plotly_is_served_by_the_app(client: TestClient) -> None:
    script = client.get("/static/plotly.min.js")
    assert script.status_code == 200 and "javascript" in script.headers["content-type"]
    assert len(script.content) > 1_000_000 and b"plotly" in script.content[:2000].lower()
    assert "immutable" in script.headers["cache-control"]
    assert client.get("/static/dashboard.css").headers["cache-control"] == "no-cache"
    assert client.get("/static/../app.py").status_code == 404
    assert client.get("/static/nothing.js").status_code == 404


def test_colour_scale_keeps_bands_apart() -> None:
    scale = heatmap.colour_scale()
    positions = [position for position, _ in scale]
    assert positions == sorted(positions) and positions[0] == 0 and positions[-1] == 1
    strongest_pass = matrix_module.MatrixCell(1, "pass", 1.0)
    assert heatmap.cell_value(strongest_pass) < 1  # still in the pass band, not the next


def test_a_finished_runs_layout_is_kept_with_its_report(database_url: str, client: TestClient,
                                                        cell_factory: Cells) -> None:
    """Finalising stores the unfiltered matrix layout; the run page then reads it instead of every cell."""
    from gradci.services.db.models import StoredReport
    from gradci.services.reports.run_report import store_report

    cells = [cell(cell_factory, 0, "a/ok", "pass"), cell(cell_factory, 1, "b/broken", "fail", backend="fd")]
    run_id = make_run(database_url, cells, status="failed")
    with session_scope(database_url) as session:
        store_report(session, session.get(Run, run_id))
    with session_scope(database_url) as session:
        stored = session.get(StoredReport, run_id)
        assert stored.matrix_layout == {"rows": ["b/broken", "a/ok"],
                                        "axes": [["gradient", "fd", "cpu", "float64"],
                                                 ["gradient", "jax-rev", "cpu", "float64"]]}
        # Not what the cells say: only a page that reads the kept layout shows this order.
        stored.matrix_layout = {**stored.matrix_layout, "rows": ["a/ok", "b/broken"]}
    trace = embedded_figure(client.get(f"/runs/{run_id}").text, "heatmap")["data"][0]
    assert trace["y"] == [["a", "b"], ["ok", "broken"]]
    filtered = embedded_figure(client.get(f"/runs/{run_id}?backend=fd").text, "heatmap")["data"][0]
    assert filtered["y"] == [["b"], ["broken"]]  # a filtered view is worked out from the cells
