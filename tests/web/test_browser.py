"""The dashboard in real headless Chromium (Debian's ``chromium`` and ``chromium-driver``, driven by
Selenium; ``make test`` installs them): runs made through the real service (API over HTTP, a
``gradci worker`` process, PostgreSQL, Redis), then run → cell (a click on the heatmap) → scenario
history → compare, and a running run's page moving without a reload (each poll naming the state it
shows). Screenshots of every page land in ``artifacts/screenshots/``, at desktop and phone width (no
page wider than the phone) and the run page in grey (statuses told apart without colour). No browser
process outlives the tests.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from gradci._testing.processes import wait_for
from gradci._testing.service import Service
from gradci.services.db.models import Run
from gradci.services.db.session import session_scope
from tests.support.browser import PHONE, browser, script_errors, shoot, shoot_phone  # noqa: F401 - browser: a fixture

pytestmark = pytest.mark.integration



def submit(service: Service, **fields: Any) -> int:
    return service.submit(**{"backends": ["torch-rev", "fd"], "dtypes": ["float64"], **fields})


def wait_finished(service: Service, run_id: int) -> None:
    service.wait_finished(run_id, timeout_s=180)


def wait_until(driver: Any, script: str, what: str, timeout_s: float = 30) -> Any:
    return wait_for(lambda: driver.execute_script(script), what, timeout_s=timeout_s, interval_s=0.2)


def click_heatmap_cell(driver: Any, row: int, column: int, chart: str = "heatmap") -> None:
    """A real mouse click on a heatmap's cell (row, column), where plotly drew it."""
    from selenium.webdriver.common.action_chains import ActionChains

    x, y = driver.execute_script("""
        const plot = document.getElementById(arguments[2]), layout = plot._fullLayout;
        const box = plot.getBoundingClientRect();
        return [box.left + layout.xaxis._offset + layout.xaxis.l2p(arguments[1]),
                box.top + layout.yaxis._offset + layout.yaxis.l2p(arguments[0])];""", row, column, chart)
    actions = ActionChains(driver)
    actions.w3c_actions.pointer_action.move_to_location(int(x), int(y))
    actions.w3c_actions.pointer_action.click()
    actions.perform()


def test_run_cell_history_compare(dashboard_service: Service, browser: Any) -> None:
    first = submit(dashboard_service, scenarios=["ok/*", "crash/*"])
    wait_finished(dashboard_service, first)
    second = submit(dashboard_service, scenarios=["ok/*", "crash/*"])
    wait_finished(dashboard_service, second)
    url = dashboard_service.url

    browser.get(f"{url}/")
    shoot(browser, "1-runs")
    shoot_phone(browser, "1-runs")
    browser.find_element("css selector", f'a[href="/runs/{second}"]').click()
    wait_until(browser, "return document.querySelector('#heatmap .hm') !== null", "the heatmap")
    assert "failed" in browser.find_element("id", "run-status").text
    assert browser.find_element("css selector", '[data-count="error"]').text == "2"  # the segfault, 2 backends
    shoot(browser, "2-run")
    trace = browser.execute_script("return document.getElementById('heatmap').data[0]")
    assert trace["y"][0][0] == "crash"  # the failing family first
    cell_id = trace["customdata"][0][0]
    click_heatmap_cell(browser, 0, 0)
    wait_for(lambda: f"/runs/{second}/cells/{cell_id}" in browser.current_url, "the click to open the cell",
             timeout_s=15)
    assert "crash/segfault" in browser.find_element("tag name", "h2").text
    assert "SIGSEGV" in browser.page_source
    ran_with = browser.find_element("id", "ran-with").text
    assert "job " in ran_with.splitlines()[0] and "not recorded" not in ran_with.splitlines()[0]  # the worker
    shoot(browser, "3-cell")
    shoot_phone(browser, "3-cell")

    browser.find_element("link text", "History of crash/segfault").click()
    # A scenario that always crashed has statuses to show but no error ÷ tolerance: the page says so.
    wait_until(browser, "return document.querySelector('#chart-status .hm') !== null", "the status chart")
    empty = browser.find_element("id", "chart-tolerance_ratio")
    assert empty.tag_name == "p" and "no cell of these runs recorded errors" in empty.text
    assert browser.execute_script("return document.getElementById('chart-status').data[0].text[0][0]") == "⚠"
    shoot(browser, "4-history-errors")
    with session_scope(dashboard_service.database_url, readonly=True) as session:
        repository = session.get(Run, second).repository_id  # a scenario's history is its repository's
    browser.get(f"{url}/scenarios/ok/poly?repository={repository}")
    wait_until(browser, "return document.querySelectorAll('.js-plotly-plot').length === 4", "the history charts")
    series = browser.execute_script("return document.getElementById('chart-time_ms').data.map(s => s.x.length)")
    assert series and all(points == 2 for points in series)  # both runs, per backend
    hover, icon = browser.execute_script("const trace = document.getElementById('chart-status').data[0];"
                                         "return [trace.hovertext[0][1], trace.text[0][1]]")
    assert hover.endswith("✔ pass") and icon == ""  # the commit and the status in words; a pass has no icon
    shoot(browser, "4-history")
    shoot_phone(browser, "4-history")
    first_cell = browser.execute_script("return document.getElementById('chart-status').data[0].customdata[0][0]")
    assert first_cell.startswith(f"{first}/cells/")
    click_heatmap_cell(browser, 0, 0, "chart-status")  # the first run's cell, from the history
    wait_for(lambda: browser.current_url.endswith(f"/runs/{first_cell}"), "the history's click to open the cell",
             timeout_s=15)
    browser.back()
    wait_until(browser, "return document.getElementById('compare-latest') !== null", "the history page again")

    browser.find_element("id", "compare-latest").click()
    wait_for(lambda: f"/runs/{first}/compare/{second}" in browser.current_url, "the compare page", timeout_s=15)
    # How many cells changed is timing (a cell's time may move by the factor or not): the count and its words.
    assert re.search(r"<strong>\d+</strong> cells? changed", browser.page_source)
    shoot(browser, "5-compare")
    shoot_phone(browser, "5-compare")

    browser.get(f"{url}/workers")
    assert "✔ online" in browser.page_source
    assert "free of" in browser.find_element("id", "workers").text  # the cpu's memory from its device record
    shoot(browser, "6-workers")
    shoot_phone(browser, "6-workers")
    browser.set_window_size(*PHONE)
    browser.get(f"{url}/runs/{second}")
    wait_until(browser, "return document.querySelector('#heatmap .hm') !== null", "the heatmap at phone width")
    shoot_phone(browser, "2-run")
    browser.get(f"{url}/runs/{second}")  # at desktop width again (shoot_phone restores it)
    wait_until(browser, "return document.querySelector('#heatmap .hm') !== null", "the heatmap at desktop width")
    # Without colour (grey scale, as a colour-blind reader or a grey printout sees it) the statuses
    # are still told apart: by the words and icons beside them.
    browser.execute_script("document.documentElement.style.filter = 'grayscale(1)'")
    shoot(browser, "7-run-grey")
    assert all(word in browser.find_element("css selector", ".counts").text for word in ("✔ pass", "✘ fail", "⚠ error"))
    icons = browser.execute_script("return Array.from(document.querySelectorAll('#heatmap text'), t => t.textContent)")
    assert icons.count("⚠") == 2 and "✔" not in icons  # drawn in the cells that did not pass
    # A passing cell of a real run: the engine's reference and the job's device record.
    browser.get(f"{url}/runs/{second}?status=pass")
    browser.find_element("css selector", f'td a[href^="/runs/{second}/cells/"]').click()
    reference = browser.find_element("id", "reference").text.splitlines()
    assert reference[0].startswith("reference ") and "not recorded" not in reference[0]
    assert "torch " in browser.find_element("id", "ran-with").text
    shoot(browser, "3-cell-pass")
    assert script_errors(browser) == []


def test_a_running_runs_page_moves_without_reloading(dashboard_service: Service, browser: Any) -> None:
    run_id = submit(dashboard_service, scenarios="slow/*", backends=["torch-rev"])
    browser.get(f"{dashboard_service.url}/runs/{run_id}")
    browser.execute_script("window.loadedOnce = true")  # gone if the page reloads
    jobs = lambda: browser.find_element("id", "jobs-text").text
    passed = lambda: int(browser.find_element("css selector", '[data-count="pass"]').text)
    at_start = (jobs(), passed())
    shoot(browser, "8-live-start")
    polls = browser.execute_script("return performance.getEntriesByType('resource')"
                                   ".filter(e => e.name.includes('live.json')).length")
    wait_for(lambda: browser.execute_script("return window.loadedOnce === true") and passed() > at_start[1],
             "the pass count to move in place", timeout_s=120, interval_s=0.5)
    assert jobs() != at_start[0]
    rows, count = browser.execute_script("""return [document.getElementById('heatmap').data[0].y[1].length,
        Number(document.querySelector('[data-count="pass"]').textContent)]""")  # one poll's state
    assert rows == count  # the heatmap grew with the cells: one slow scenario a row
    sent = browser.execute_script("return performance.getEntriesByType('resource')"
                                  ".filter(e => e.name.includes('live.json')).map(e => e.name)")
    assert len(sent) > polls and all("since=" in name for name in sent)  # each poll names the state it shows
    shoot(browser, "9-live-moving")
    wait_finished(dashboard_service, run_id)
    wait_until(browser, "return window.loadedOnce === undefined", "the finished run's page to reload once", 30)
    assert browser.find_element("id", "run-status").text == "passed"
    assert script_errors(browser) == []
    assert browser.execute_script("return document.getElementById('run-page').dataset.live") == "false"


def test_signing_in_with_github_opens_a_private_repositorys_run(browser: Any, tmp_path: Path) -> None:
    """From a private repository's run page (not found for nobody), the page's sign-in link, the
    (fake) GitHub's authorize page, and back to the run, now shown: a real ``gradci api`` process
    as deployed (read_access public), asking the fake GitHub what the signed-in user may read."""
    from gradci._testing.service import running_service
    from gradci.services.db.migrate import upgrade
    from gradci.services.db.results import upsert_results
    from gradci.services.db.runs import create_run, get_or_create_repository
    from tests.support.cells import synthetic_cell
    from tests.support.fake_github import FakeGitHub

    database_url = f"sqlite:///{tmp_path / 'gradci.db'}"
    upgrade(database_url)
    with session_scope(database_url) as session:
        repository = get_or_create_repository(session, "https://github.com/acme/secret.git", "acme/secret")
        run = create_run(session, repository=repository, head_sha="5ec2e7" + "0" * 34)
        run.status = "failed"
        session.flush()
        run_id = run.id
    with session_scope(database_url) as session:
        upsert_results(session, run_id, [{**synthetic_cell(0, status="fail"), "scenario": "secretops/attention_grad"}])
    with FakeGitHub() as github:
        client_id, client_secret = github.add_oauth_app()
        github.add_repository("acme/secret", private=True, readers=("alice",))
        with running_service(database_url, f"sqla+sqlite:///{tmp_path / 'broker.db'}", tmp_path / "work",
                             tmp_path / "logs", worker=False, read_access="public", github_api_url=github.url,
                             github_web_url=github.url, github_oauth_client_id=client_id,
                             github_oauth_client_secret=client_secret) as service:
            browser.delete_all_cookies()
            browser.get(f"{service.url}/runs/{run_id}")
            assert "secretops/attention_grad" not in browser.page_source and "not found" in browser.page_source
            shoot(browser, "5-private-run-signed-out")
            browser.find_element("id", "sign-in-to-see").click()
            wait_for(lambda: browser.current_url.startswith(f"{github.url}/login/oauth/authorize"),
                     "GitHub's authorize page", timeout_s=15)
            browser.find_element("id", "login_field").send_keys("alice")
            shoot(browser, "6-github-authorize")
            browser.find_element("id", "authorize").click()
            wait_for(lambda: browser.current_url == f"{service.url}/runs/{run_id}", "back at the run", timeout_s=30)
            assert browser.find_element("id", "signed-in").text == "alice"
            assert "secretops/attention_grad" in browser.page_source and "acme/secret" in browser.page_source
            shoot(browser, "7-private-run-signed-in")
            browser.find_element("css selector", "header form button").click()  # sign out
            wait_for(lambda: "Sign in with GitHub" in browser.page_source, "signed out", timeout_s=15)
            browser.get(f"{service.url}/runs/{run_id}")
            assert "secretops/attention_grad" not in browser.page_source


RULES_SOURCE = {"forward": "    @staticmethod\n    def forward(ctx, x):\n        ctx.save_for_backward(x)\n"
                           "        return x.sin()\n",
                "backward": "    @staticmethod\n    def backward(ctx, g):\n        (x,) = ctx.saved_tensors\n"
                            "        return x.cos() * g\n",
                "jvp": "    @staticmethod\n    def jvp(ctx, t):\n        (x,) = ctx.saved_tensors\n"
                       "        return x.cos() * t\n"}


def seed_rules(service: Service, run_id: int) -> None:
    """A rule of three methods: its forward and backward ran in torch-rev cells, its jvp in none."""
    from gradci.services.db.rules import reach_rows, record_lines, record_reaches, record_rules

    methods = [{"name": name, "file": "pkg/ops.py", "first_line": first, "lines": [first + 1, first + 2, first + 3],
                "digest": name, "source": RULES_SOURCE[name]}
               for name, first in (("forward", 5), ("backward", 10), ("jvp", 15))]
    rule = {"id": "pkg/ops.py::Sine", "kind": "torch.autograd.Function", "name": "Sine", "file": "pkg/ops.py",
            "methods": methods}
    cell = {"scenario": "ok/sine", "backend": "torch-rev", "operator": "gradient", "mode": "reverse",
            "device": "cpu", "dtype": "float64"}
    with session_scope(service.database_url) as session:
        record_rules(session, run_id, [rule])
        record_reaches(session, reach_rows(run_id, cell, {"rules": {rule["id"]: ["forward", "backward"]}}))
        record_lines(session, run_id, "job 0", {"pkg/ops.py": [1, 6, 7, 8, 11, 12, 13], "pkg/util.py": [3]})


def test_a_runs_rules_matrix_and_a_files_reached_lines(dashboard_service: Service, browser: Any) -> None:
    from selenium.webdriver.common.by import By

    run_id = submit(dashboard_service, scenarios=["ok/*"])
    wait_finished(dashboard_service, run_id)
    seed_rules(dashboard_service, run_id)
    script_errors(browser)  # reading the log empties it: what earlier tests' pages left there is theirs
    browser.get(f"{dashboard_service.url}/runs/{run_id}")
    browser.find_element(By.ID, "rules-link").click()
    wait_until(browser, "return document.getElementById('rule-matrix') !== null", "the rules page")
    entries = browser.execute_script(
        "return [...document.querySelectorAll('#rule-matrix td.reach')].map(td => [td.className, td.textContent])")
    assert entries == [["reach hit", "1"], ["reach hit", "1"], ["reach miss", "—"]]  # forward, backward, jvp
    assert "backward exercised, jvp never" in browser.find_element(By.ID, "rule-findings").text
    shoot(browser, "rules")
    shoot_phone(browser, "rules")
    browser.find_element(By.LINK_TEXT, "pkg/ops.py").click()
    wait_until(browser, "return document.querySelector('pre.source') !== null", "the file's lines")
    colours = browser.execute_script("""
        const of = n => getComputedStyle(document.querySelector(`[data-line="${n}"]`)).backgroundColor;
        return [of(11), of(16), of(10)];""")
    assert colours[0] != colours[1] and "0, 0, 0, 0" in colours[2]  # reached, missed, a line that runs nothing
    assert browser.find_element(By.ID, "reached-lines").text == "1, 6-8, 11-13"
    assert script_errors(browser) == []
    shoot(browser, "rules-file")
    shoot_phone(browser, "rules-file")
