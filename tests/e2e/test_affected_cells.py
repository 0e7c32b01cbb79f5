"""Affected cells end to end: a default-branch push is checked in full; a pull request then re-runs only
the cells its change can affect and carries the rest from that run, with their provenance, in its check
run, its comment, the dashboard and the API — on a real worker (PostgreSQL, Redis, the sandboxed
runner) in App mode.

The project is tests/data/projects/rule_coverage (rules Cube, Square and a wrong one, reached from
torch and jax) plus a scenario whose function always raises (an ``error`` cell, never carried).
"""
from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy import select

from gradci._testing.processes import wait_for
from gradci._testing.repos import commit_all, git, init_repository
from gradci._testing.service import Service, jobs_of
from gradci.services.broker.queues import PLAN_RUN
from gradci.services.db.models import CarriedReference, Run
from gradci.services.db.session import session_scope
from tests.support import webhook_client
from tests.support.app_service import FULL_NAME, INSTALLATION, app_service
from tests.support.broker import send_task
from tests.support.fake_github import FakeGitHub
from tests.support.payloads import payload, pull_request
from tests.support.projects import PROJECTS

pytestmark = pytest.mark.integration

PR_NUMBER = 2  # the payload's pull request
SECRET = webhook_client.SECRET
OPS = "rulecov/ops.py"
SCENARIOS = "rulecov/scenarios.py"
HELPERS = "rulecov/helpers.py"
HELPER = '''"""A helper of the rules, two modules away from the scenarios."""


def factor():
    return 2


def unit():
    return 1


def unused():
    return 3
'''
BOOM = '''

def boom(v):
    raise RuntimeError("boom: this scenario always fails")
'''
# What a cell's verdict is: the fields a carried cell must share with the same cell re-run.
VERDICT = ("status", "max_abs_err", "max_rel_err", "atol", "rtol", "reference", "reference_error", "precision",
           "message", "operator", "framework", "mode")


@pytest.fixture(scope="module")
def mirror(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    """The repository's commits: ``base`` (pushed to master), ``rule`` (the helper Square's backward
    calls edited, the same derivative), ``forward`` (the helper its forward calls edited, the same
    function), ``readme`` (the base's code and a README)."""
    root = tmp_path_factory.mktemp("mirrors")
    repo = init_repository(root / "Codertocat" / "Hello-World.git", "master")
    shutil.copytree(PROJECTS / "rule_coverage", repo, dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns("__pycache__"))
    scenarios = (repo / SCENARIOS).read_text()
    scenarios = scenarios.replace("\n\ndef scenarios():", BOOM + "\n\ndef scenarios():").replace(
        "    ]\n", '        Scenario("boom/gradient", "gradient", {"torch": boom}, x),\n    ]\n')
    (repo / SCENARIOS).write_text(scenarios)
    # Square's backward takes its factor from a helper, through its module: the scenario's fingerprint
    # names the module only, so the cell's dependency record alone sees a change of the helper.
    ops = (repo / OPS).read_text()
    assert ops.count("return 2 * x * g") == 1
    # Its forward takes a unit from the same helper: what its finite-difference reference runs.
    assert ops.count("return x * x\n") == 2
    ops = ops.replace("return x * x\n", "return x * x * helpers.unit()\n", 1)
    (repo / OPS).write_text("from rulecov import helpers\n" + ops.replace("return 2 * x * g",
                                                                          "return helpers.factor() * x * g"))
    (repo / HELPERS).write_text(HELPER)
    shas = {"base": commit_all(repo, "base")}
    (repo / HELPERS).write_text(HELPER.replace("return 2", "return 1 + 1"))
    shas["rule"] = commit_all(repo, "Square's factor: the same, written differently")
    (repo / HELPERS).write_text(HELPER.replace("return 1", "return 2 - 1"))
    shas["forward"] = commit_all(repo, "Square's unit: the same, written differently")
    (repo / HELPERS).write_text(HELPER)
    (repo / "README.md").write_text("# Hello\n\nDocs only.\n")
    shas["readme"] = commit_all(repo, "docs only")
    assert git(repo, "diff", "--name-only", shas["base"], shas["readme"]) == "README.md"
    return root, shas


@pytest.fixture(scope="module")
def service(postgres_database, redis_database, mirror, github_app, tmp_path_factory) -> Iterator[Service]:
    # Spare runners as in production: after the first pull request the next ones take a spare.
    with app_service(postgres_database, redis_database, mirror[0], *github_app, tmp_path_factory,
                     runner_spare="true") as running:
        yield running


def deliver(service: Service, event: str, body: dict) -> None:
    body = {**body, "installation": {"id": INSTALLATION}}
    assert webhook_client.deliver_over_http(service.url, event, body, None, SECRET).status_code == 202


def push(service: Service, sha: str) -> None:
    body = payload("push")
    body.update(ref="refs/heads/master", after=sha, deleted=False)
    body["repository"]["default_branch"] = "master"
    deliver(service, "push", body)


def open_pr(service: Service, action: str, head: str, base: str, labels: tuple[str, ...] = ()) -> None:
    body = pull_request(action, head, base)
    body["pull_request"]["labels"] = [{"name": name} for name in labels]
    deliver(service, "pull_request", body)


def runs_of(service: Service, sha: str) -> list[dict]:
    with service.client() as client:
        return client.get("/api/runs", params={"sha": sha}).json()["items"]


def new_finished_run(service: Service, sha: str, known: set[int]) -> dict:
    """The run of ``sha`` that is not in ``known``, once finished."""
    run = wait_for(lambda: next((r for r in runs_of(service, sha) if r["id"] not in known), None),
                   f"a new run of {sha[:7]}", timeout_s=60)
    return service.wait_finished(run["id"], timeout_s=300)


def pull_request_run(service: Service, action: str, head: str, base: str,
                     seen: set[int]) -> tuple[dict, dict[tuple[str, str, str, str], dict]]:
    """The pull request's new run of ``head`` (added to ``seen``), finished, and its cells."""
    open_pr(service, action, head, base)
    run = new_finished_run(service, head, seen)
    seen.add(run["id"])
    return run, cells(service, run["id"])


def cells(service: Service, run_id: int) -> dict[tuple[str, str, str, str], dict]:
    with service.client() as client:
        items = client.get(f"/api/runs/{run_id}/results", params={"limit": 1000}).json()["items"]
    found = {(c["scenario"], c["backend"], c["device"], c["dtype"]): c for c in items}
    assert len(found) == len(items), "a cell stored twice"
    return found


def kept_references(service: Service) -> set[int]:
    """The runs whose references were kept for later runs."""
    with session_scope(service.database_url, readonly=True) as session:
        return set(session.scalars(select(CarriedReference.run_id)))


def carried(found: dict[tuple[str, str, str, str], dict]) -> set[str]:
    return {f"{key[0]} {key[1]}" for key, cell in found.items() if cell["carried_run_id"] is not None}


def completed_check(fake: FakeGitHub, sha: str, after: int = 0) -> dict | None:
    done = [run for run in fake.check_runs_for(sha) if run.get("status") == "completed"]
    return done[after] if len(done) > after else None


ALL = {"cube/gradient torch-rev", "cube/gradient jax-rev", "cube/gradient jax-rev-jit", "square/gradient torch-rev",
       "wrong/gradient torch-rev", "boom/gradient torch-rev"}


def test_a_pull_request_re_runs_only_what_its_change_can_affect(service, mirror, github_app):
    fake, _ = github_app
    shas = mirror[1]
    seen: set[int] = set()

    # The default branch's first run is full: there is nothing to carry from, and none was full yet.
    push(service, shas["base"])
    base = new_finished_run(service, shas["base"], seen)
    seen.add(base["id"])
    assert base["status"] == "failed"  # wrong/gradient fails, boom/gradient errs
    assert "no full run yet" in base["carry"]["full"]
    base_cells = cells(service, base["id"])
    assert {f"{k[0]} {k[1]}" for k in base_cells} == ALL and carried(base_cells) == set()

    # (a) The helper Square's backward calls changed: the cells that ran it re-run (and the error, (d)),
    # the rest are carried.
    rule, rule_cells = pull_request_run(service, "opened", shas["rule"], shas["base"], seen)
    assert carried(rule_cells) == ALL - {"square/gradient torch-rev", "boom/gradient torch-rev"}
    for key, cell in rule_cells.items():
        if cell["carried_run_id"] is not None:
            assert (cell["carried_run_id"], cell["carried_sha"], cell["carried_reason"]) == \
                   (base["id"], shas["base"], "inputs unchanged"), key
    reasons = {(r["scenario"], r["backend"]): r["reason"] for r in rule["carry"]["reasons"]}
    assert reasons[("square/gradient", "torch-rev")] == f"{HELPERS} changed"
    assert reasons[("boom/gradient", "torch-rev")] == "its result was an error"  # (d)
    assert rule["carry"] | {"reasons": None} == {"base_run_id": base["id"], "base_sha": shas["base"], "carried": 4,
                                                 "rerun": 2, "reasons": None, "full": None}
    # Only the re-run cells were sent to workers; coverage counts the carried ones like fresh ones.
    assert {name for job in jobs_of(service.database_url, rule["id"]) for name in job.scenarios} == \
           {"square/gradient", "boom/gradient"}
    # Their references are the base run's: computing them ran nothing the change touched (Square's
    # forward), so they were kept by the default branch's run and offered (worker.reference_carrying).
    origin = f"carried from run {base['id']} at {shas['base'][:7]}"
    for key, cell in rule_cells.items():
        if key[0] == "square/gradient":
            assert cell["reference"].endswith(origin), (key, cell["reference"])
    assert kept_references(service) == {base["id"]}  # only the default branch's run keeps references
    # One job, checked in the process that planned it, by the runner that listed the scenarios: its
    # delivery is the plan's ("/job"), no message of its own was sent (plan_run.run_alone).
    (job,) = jobs_of(service.database_url, rule["id"])
    assert job.delivery is not None and job.delivery.endswith("/job"), job.delivery
    assert rule["counts"]["pass"] == 4 and rule["counts"]["fail"] == 1 and rule["counts"]["error"] == 1
    # The check run and the comment say what was carried, and from where.
    check = wait_for(lambda: completed_check(fake, shas["rule"]), "the rule commit's check run", timeout_s=60)
    line = f"**4** cells carried from run {base['id']} at `{shas['base'][:7]}`, inputs unchanged; **2** re-run"
    assert line in check["output"]["summary"]
    assert f"`{HELPERS} changed`" in check["output"]["summary"]
    (comment,) = wait_for(lambda: fake.comments_on(FULL_NAME, PR_NUMBER), "the pull request's comment", timeout_s=60)
    assert line in comment["body"]
    # The dashboard: the run says where its cells came from; a carried cell links to its origin.
    page = httpx.get(f"{service.url}/runs/{rule['id']}")
    assert 'id="carried-summary"' in page.text and f'href="/runs/{base["id"]}"' in page.text
    cube = rule_cells[("cube/gradient", "torch-rev", "cpu", "float64")]
    cell_page = httpx.get(f"{service.url}/runs/{rule['id']}/cells/{cube['id']}")
    origin = base_cells[("cube/gradient", "torch-rev", "cpu", "float64")]
    assert f'href="/runs/{base["id"]}/cells/{origin["id"]}"' in cell_page.text and 'id="carried"' in cell_page.text

    # A change of what Square's forward runs re-runs its cells, and their references are computed anew.
    _, forward_cells = pull_request_run(service, "synchronize", shas["forward"], shas["base"], seen)
    assert carried(forward_cells) == ALL - {"square/gradient torch-rev", "boom/gradient torch-rev"}
    for key, cell in forward_cells.items():
        if key[0] == "square/gradient":
            assert cell["status"] == "pass" and "carried" not in cell["reference"], (key, cell["reference"])
    assert kept_references(service) == {base["id"]}

    # (b) A README only: everything is carried but the error — (f) from the push's run, never the PR's.
    readme, readme_cells = pull_request_run(service, "synchronize", shas["readme"], shas["base"], seen)
    assert carried(readme_cells) == ALL - {"boom/gradient torch-rev"}
    assert {c["carried_run_id"] for c in readme_cells.values()} == {base["id"], None}
    assert readme["carry"]["base_run_id"] == base["id"]

    # (c) and (e): the same commit run in full (the API's option): nothing carried, every verdict equal.
    with service.client() as client:
        response = client.post("/api/runs", json={"repo": FULL_NAME, "sha": shas["readme"], "full": True})
    assert response.status_code == 201, response.text
    full = service.wait_finished(response.json()["id"], timeout_s=300)
    seen.add(full["id"])
    assert full["carry"]["full"] == "asked for a full run (full)"
    full_cells = cells(service, full["id"])
    assert carried(full_cells) == set() and full_cells.keys() == readme_cells.keys()
    for key in full_cells:
        assert {f: readme_cells[key][f] for f in VERDICT} == {f: full_cells[key][f] for f in VERDICT}, key

    # (e) The pull request labelled "full": every cell runs.
    open_pr(service, "synchronize", shas["readme"], shas["base"], labels=("full",))
    labelled = new_finished_run(service, shas["readme"], seen)
    assert labelled["carry"]["full"] == "the pull request is labelled 'full'"
    labelled_cells = cells(service, labelled["id"])
    assert carried(labelled_cells) == set()
    # Its runner was the spare the first pull request left (the worker keeps one after a pull request's
    # task), and its verdicts are the fresh full run's.
    assert "the spare, taken for" in (service.logs / "gradci.worker.log").read_text(errors="replace")
    for key in full_cells:
        assert {f: labelled_cells[key][f] for f in VERDICT} == {f: full_cells[key][f] for f in VERDICT}, key


def test_a_run_whose_every_cell_is_carried_has_no_job_and_finishes(service):
    """The built-in library: its cells' record is their scenario's fingerprint, in gradci's environment."""
    matrix = {"scenarios": "elementary/num-to-num/gradient", "backends": ["torch-rev"], "dtypes": ["float64"]}
    with service.client() as client:
        first, again = (service.wait_finished(client.post("/api/runs", json=matrix).json()["id"], timeout_s=300)
                        for _ in range(2))
    assert first["status"] == again["status"] == "passed"
    assert again["carry"] | {"reasons": None} == {"base_run_id": first["id"], "base_sha": None, "carried": 1,
                                                  "rerun": 0, "reasons": None, "full": None}
    assert jobs_of(service.database_url, again["id"]) == [] and again["coverage"] == 100.0
    # Decided before any scenario was listed: nothing its cells depend on changed (no runner asked).
    assert f"run {again['id']}: carried whole from run {first['id']}" in service.log("gradci.worker.log")
    (cell,) = cells(service, again["id"]).values()
    assert (cell["carried_run_id"], cell["carried_reason"]) == (first["id"], "inputs unchanged")

    # At least once: a carried run whose plan is delivered again stores no cell twice. Its plan is
    # delivered again, as the reconciler does for a queued run with no job, and finalize with it.
    with session_scope(service.database_url) as session:
        run = session.get(Run, again["id"])
        assert run is not None
        run.status, run.finished_at = "queued", None  # as if its finalize_run had been lost
    send_task(service.broker_url, PLAN_RUN, again["id"])
    healed = service.wait_finished(again["id"], timeout_s=120)
    assert healed["status"] == "passed" and healed["counts"]["pass"] == 1
    assert list(cells(service, again["id"]).values())[0]["id"] == cell["id"]  # the same row, rewritten
