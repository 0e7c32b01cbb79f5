"""GitHub pieces without the service: signatures, event decisions, the client against a fake GitHub
over real HTTP, the report and its markdown."""
from __future__ import annotations

import copy

import pytest
from sqlalchemy import select

from gradci.services.db.models import Result
from gradci.services.db.results import upsert_results
from gradci.services.db.runs import create_run
from gradci.services.db.session import session_scope
from gradci.services.github import events, signature
from gradci.services.github.client import GitHubClient, GitHubError
from gradci.services.github.events import DecisionKind
from gradci.services.reports.diff import tolerance_ratio
from gradci.services.reports.markdown import MARKER, render
from gradci.services.reports.targets import Target, TargetConfigError, parse_report_config
from tests.support.fake_github import SERVICE_LOGIN, FakeGitHub
from tests.support.payloads import payload
from tests.support.report_cases import cell, report_of, stored_cell


def test_signature_roundtrip_and_rejections():
    body = b'{"zen": "Keep it logically awesome."}'
    good = signature.sign("s3cret", body)
    assert signature.verify("s3cret", body, good)
    assert not signature.verify("other", body, good)
    assert not signature.verify("s3cret", body + b" ", good)
    assert not signature.verify("s3cret", body, None)
    assert not signature.verify("s3cret", body, good.replace("sha256=", "sha1="))


@pytest.mark.parametrize("name, kind", [
    ("pull_request.opened", DecisionKind.run_pr), ("pull_request.synchronize", DecisionKind.run_pr),
    ("pull_request.reopened", DecisionKind.run_pr), ("pull_request.closed", DecisionKind.cancel_pr),
    ("pull_request.opened.null-body", DecisionKind.run_pr),
])
def test_pull_request_actions(name, kind):
    d = events.decide("pull_request", payload(name), allowed=[])
    assert d.kind is kind
    assert d.full_name == "Codertocat/Hello-World" and d.pr_number == 2 and len(d.head_sha) == 40


def test_labeled_with_other_label_is_ignored_and_approval_label_runs():
    p = payload("pull_request.labeled")
    assert events.decide("pull_request", p, allowed=[]).kind is DecisionKind.ignore
    p["label"]["name"] = "gradci:run"
    assert events.decide("pull_request", p, allowed=[]).kind is DecisionKind.run_pr


def test_forks_wait_for_approval_including_deleted_forks():
    p = payload("pull_request.opened")
    p["pull_request"]["head"]["repo"]["full_name"] = "mallory/Hello-World"
    assert events.decide("pull_request", p, allowed=[]).kind is DecisionKind.await_approval
    p["pull_request"]["head"]["repo"] = None
    assert events.decide("pull_request", p, allowed=[]).kind is DecisionKind.await_approval
    # A label is an approval of the head it was added on (its "labeled" event): one left from an
    # earlier push approves no later one, nor a reopened pull request.
    p["pull_request"]["labels"] = [{"name": "gradci:run"}]
    for action in ("synchronize", "opened", "reopened"):
        p["action"] = action
        decision = events.decide("pull_request", p, allowed=[])
        assert decision.kind is DecisionKind.await_approval and "approved an earlier commit" in decision.reason
    p["action"], p["label"] = "labeled", {"name": "gradci:run"}
    assert events.decide("pull_request", p, allowed=[]).kind is DecisionKind.run_pr


def test_app_mode_runs_registered_repositories_only():
    """Anyone can install an App: its webhooks are signed with the App's secret whoever installed it."""
    p = {**payload("pull_request.opened"), "installation": {"id": 7}}
    stranger = events.decide("pull_request", p, allowed=[], app_mode=True)
    assert stranger.kind is DecisionKind.unregistered and stranger.installation_id == 7
    assert stranger.head_sha == p["pull_request"]["head"]["sha"] and "not registered" in stranger.reason
    assert events.decide("pull_request", p, allowed=["*"], app_mode=True).kind is DecisionKind.run_pr
    assert events.decide("pull_request", p, allowed=[], app_mode=False).kind is DecisionKind.run_pr
    closed = events.decide("pull_request", {**p, "action": "closed"}, allowed=[], app_mode=True)
    assert closed.kind is DecisionKind.refuse
    # gradci repos add registers it (as GitHub, in any case); another stays out.
    full_name = p["repository"]["full_name"]
    assert events.decide("pull_request", p, allowed=[], app_mode=True,
                         registered={full_name.upper().lower()}).kind is DecisionKind.run_pr
    assert events.decide("pull_request", p, allowed=[], app_mode=True,
                         registered={"someone/else"}).kind is DecisionKind.unregistered
    installed = events.decide("installation", {"action": "created", "installation": {"id": 7}, "repositories": [
        {"full_name": full_name.upper()}, {"full_name": "someone/else"}]}, allowed=[], app_mode=True,
        registered={full_name.lower()})
    assert installed.added == (full_name.upper(),)


def test_allowed_repos_and_clone_url_template():
    p = payload("pull_request.opened")
    assert events.decide("pull_request", p, allowed=["octo/*"]).kind is DecisionKind.refuse
    d = events.decide("pull_request", p, allowed=["Codertocat/*"], clone_url_template="file:///m/{full_name}.git")
    assert d.kind is DecisionKind.run_pr and d.clone_url == "file:///m/Codertocat/Hello-World.git"


def test_push_to_default_branch_is_a_baseline_and_tags_are_ignored():
    p = payload("push")
    assert events.decide("push", p, allowed=[]).kind is DecisionKind.ignore  # refs/tags/simple-tag
    p = copy.deepcopy(p)
    p["ref"], p["after"], p["deleted"] = "refs/heads/master", "a" * 40, False
    d = events.decide("push", p, allowed=[])
    assert d.kind is DecisionKind.baseline and d.head_sha == "a" * 40


def test_ping_and_unknown_events():
    assert events.decide("ping", payload("ping"), allowed=[]).kind is DecisionKind.ping
    assert events.decide("issues", {"action": "opened"}, allowed=[]).kind is DecisionKind.ignore


def test_client_retries_502_twice_then_succeeds():
    with FakeGitHub() as gh, GitHubClient(gh.url, "t0ken", backoff_s=0.01) as client:
        gh.fail_next = [502, 502]
        client.set_status("o/r", "a" * 40, "gradci/project", "success", "x" * 300, "http://d/runs/1")
        assert [c["method"] for c in gh.calls] == ["POST"] * 3
        assert len(gh.statuses) == 1 and len(gh.statuses[0]["description"]) <= 140
        assert gh.calls[0]["headers"]["Authorization"] == "Bearer t0ken"


def test_client_gives_up_after_attempts_and_does_not_retry_4xx():
    with FakeGitHub() as gh, GitHubClient(gh.url, None, attempts=3, backoff_s=0.01) as client:
        gh.fail_next = [503, 503, 503]
        with pytest.raises(GitHubError) as info:
            client.set_status("o/r", "a" * 40, "c", "pending", "d")
        assert info.value.retryable and len(gh.calls) == 3
        gh.fail_next = [404]
        with pytest.raises(GitHubError) as info:
            client.set_status("o/r", "a" * 40, "c", "pending", "d")
        assert not info.value.retryable and len(gh.calls) == 4


def test_one_comment_edited_in_place():
    with FakeGitHub() as gh, GitHubClient(gh.url, "gh-token", backoff_s=0.01) as client:
        client.upsert_comment("o/r", 7, f"{MARKER}\nfirst", MARKER, SERVICE_LOGIN)
        client.upsert_comment("o/r", 7, f"{MARKER}\nsecond", MARKER, SERVICE_LOGIN)
        comments = gh.comments_on("o/r", 7)
        assert len(comments) == 1 and comments[0]["body"].endswith("second")


def test_report_regressions_fixes_near_misses_and_patch(sqlite_url):
    base = [cell("a", "pass"), cell("b", "fail"), cell("c", "pass", err=1e-9), cell("d", "pass"), cell("s", "skip")]
    head = [cell("a", "fail"), cell("b", "pass"), cell("c", "pass", err=7e-7), cell("d", "pass"),
            cell("e", "error"), cell("s", "skip")]
    report = report_of(sqlite_url, head, {n: n for n in "abcdes"}, base, {"a": "a", "b": "changed", "c": "c", "d": "d"},
                       pr_number=5, config={"report": {"patch": {"target": 100}}})
    assert [c.scenario for c in report.regressions] == ["a"]
    assert [c.scenario for c in report.fixes] == ["b"]
    assert [c.scenario for c in report.near_misses] == ["c"]
    assert report.changed_scenarios == ["b", "e", "s"]
    assert report.project.coverage == pytest.approx(60.0) and report.project.base_coverage == 75.0
    assert report.project.state == "failure"       # auto target: the base's 75%
    assert report.patch.coverage == 50.0 and report.patch.state == "failure"
    assert all(len(status.description) <= 140 for status in (report.project, report.patch))


def test_targets_threshold_and_informational():
    assert Target(target=80.0, threshold=5).state(76.0, None) == "success"
    assert Target(target=80.0, threshold=1).state(76.0, None) == "failure"
    assert Target(target=80.0, informational=True).state(10.0, None) == "success"
    assert Target().state(50.0, None) == "success"  # auto without a base: nothing to compare with
    project, patch = parse_report_config({"report": {"project": {"target": "90%", "threshold": "1%"},
                                                     "patch": {"informational": True}}})
    assert project == Target(target=90.0, threshold=1.0) and patch.informational
    with pytest.raises(TargetConfigError):
        parse_report_config({"report": {"project": {"target": "most"}}})


def test_markdown_has_header_table_and_diff_block(sqlite_url):
    base = [cell("a", "pass"), cell("b", "fail")]
    head = [cell("a", "fail"), cell("b", "pass"), cell("c", "pass")]
    report = report_of(sqlite_url, head, {"a": "1", "b": "2", "c": "3"}, base, {"a": "1", "b": "2"}, pr_number=9)
    text = render(report, "http://dash/runs/3")
    assert text.startswith(MARKER)
    assert "Patch coverage is **100.00%** and project coverage is **66.67%**" in text
    assert "`1234567`" in text and "`abcdef0`" in text
    assert "| `torch-rev` | `cpu` | 66.67% | `a [float64]` |" in text
    assert "@@           Gradient Coverage Diff           @@" in text and "#9" in text
    lines = text.split("```diff\n")[1].split("```")[0].splitlines()
    rows = {line[2:12].strip(): line for line in lines if line[:1] in "+- " and line[2:3].isalpha()}
    assert rows["Coverage"].startswith("+") and rows["Passed"].startswith("+")
    assert rows["Failed"].startswith(" ") and rows["Cells"].startswith(" ")
    assert "**Regressions** (1)" in text and "pass → fail" in text


def test_huge_report_stays_under_githubs_comment_limit(sqlite_url):
    head = [cell(f"s{i:05d}/" + "x" * 200, "fail") for i in range(3000)]
    report = report_of(sqlite_url, head, {})
    assert len(render(report)) <= 65536


def test_tolerance_ratio(sqlite_url):
    cells = [cell("half", "pass", err=5e-7), {**cell("unknown", "error"), "max_abs_err": None, "max_rel_err": None},
             {**cell("abs-only", "pass", err=5e-10), "rtol": 0.0}]
    with session_scope(sqlite_url) as session:
        run = create_run(session)
        upsert_results(session, run.id, [stored_cell(c) for c in cells])
        ratios = dict(session.execute(select(Result.scenario, tolerance_ratio(Result)).where(Result.run_id == run.id)).all())
    assert ratios == {"half": pytest.approx(0.5), "unknown": None, "abs-only": pytest.approx(0.5)}
