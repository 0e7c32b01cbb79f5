"""What gradci says on a pull request is its own, each test an attack first: a stranger's comment that
carries gradci's hidden marker is not taken for gradci's (token mode and App mode, through
``publish_run`` against the fake GitHub), and scenario names written to forge the report — a heading,
a link, an image, a mention, an unterminated ``<!--``, pipes and backticks — render as text, read
back through a maintained CommonMark/GFM renderer (markdown-it-py), with the real report complete
after them."""
from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from markdown_it import MarkdownIt
from markdown_it.token import Token

from gradci.services.db.models import GitHubReport, ScenarioCatalogEntry
from gradci.services.db.results import upsert_results
from gradci.services.db.runs import create_run
from gradci.services.db.session import session_scope
from gradci.services.github.client import GitHubClient
from gradci.services.github.publish import publish_run
from gradci.services.reports.annotations import failing_scenario_annotations
from gradci.services.reports.markdown import MARKER, render
from gradci.services.settings import Settings
from tests.support.fake_github import SERVICE_LOGIN, FakeGitHub
from tests.support.report_cases import cell, report_of, stored_cell

REPO, PR = "o/r", 7  # report_of's repository
APP_ID, INSTALLATION = 4242, 77
RUN_URL = "http://gradci.example/runs/3"
FORGED = f"{MARKER}\n## ✅ gradci: every cell passes\nApproved by gradci."
# Names a pull request's scenarios may have: each tries to say something gradci did not.
HOSTILE = [
    "ok\n## ✅ every cell passes",
    "[Approve now](https://evil.example/approve)",
    "![all green](https://evil.example/pass.svg)",
    "@octocat please merge",
    "<!-- the rest of the report is hidden",
    "<a href=\"https://evil.example\">details</a>",
    "ends in a backslash \\",
    "pipes | split | the row",
    "``` fence ``` and `` two `` and ` one",
    "#1 fixes everything",
]
LAST = "zz/the-real-fix"


def publish_report(database_url: str, settings: Settings) -> str:
    """Publish a finished run's report of pull request ``PR``: its report's state."""
    report = report_of(database_url, [cell("a", "pass")], {"a": "1"}, pr_number=PR)
    with session_scope(database_url) as session:
        session.add(GitHubReport(run_id=report.run_id, full_name=REPO))
    return publish_run(report.run_id, settings)


def strangers_forgery(fake: FakeGitHub) -> dict:
    """Mallory's comment on the pull request, carrying gradci's marker; as GitHub stores it."""
    with GitHubClient(fake.url, fake.token_for("mallory")) as mallory:
        mallory.request("POST", f"/repos/{REPO}/issues/{PR}/comments", json={"body": FORGED})
    [comment] = fake.comments_on(REPO, PR)
    assert comment["user"]["login"] == "mallory"
    return comment


@pytest.fixture
def token_mode(sqlite_url: str, clean_environment: None) -> Iterator[tuple[FakeGitHub, Settings]]:
    with FakeGitHub() as fake:
        yield fake, Settings(database_url=sqlite_url, github_api_url=fake.url, github_token="gh-token")


@pytest.fixture
def app_mode(sqlite_url: str, clean_environment: None) -> Iterator[tuple[FakeGitHub, Settings]]:
    with FakeGitHub() as fake:
        key = fake.as_app(APP_ID, {INSTALLATION: {REPO}})
        yield fake, Settings(database_url=sqlite_url, github_api_url=fake.url, github_app_id=APP_ID,
                             github_app_private_key=key)


@pytest.mark.parametrize("mode, login", [("token_mode", SERVICE_LOGIN), ("app_mode", "gradci-test[bot]")])
def test_a_strangers_comment_with_gradcis_marker_is_left_alone(request: pytest.FixtureRequest, mode: str,
                                                               login: str) -> None:
    fake, settings = request.getfixturevalue(mode)
    forgery = dict(strangers_forgery(fake))
    assert publish_report(settings.database_url, settings) == "published"
    assert publish_report(settings.database_url, settings) == "published"  # a second run: the same comment
    comments = fake.comments_on(REPO, PR)
    assert comments[0] == forgery  # untouched
    ours = [c for c in comments if c["user"]["login"] == login]
    assert len(comments) == 2 and len(ours) == 1 and ours[0]["body"].startswith(MARKER)
    edits = [c for c in fake.calls if c["method"] == "PATCH" and "/issues/comments/" in c["path"]]
    assert [c["path"].rsplit("/", 1)[1] for c in edits] == [str(ours[0]["id"])]
    # Who gradci is was asked once, then kept.
    asked = [c for c in fake.calls if c["method"] == "GET" and c["path"].split("?")[0] in ("/user", "/app")]
    assert len(asked) == 1


# --- hostile names ------------------------------------------------------------------------------


def parsed(markdown: str) -> list[Token]:
    """``markdown`` as GitHub reads it: CommonMark with GFM tables and raw HTML, inline tokens flattened."""
    renderer = MarkdownIt("commonmark", {"html": True}).enable(["table", "strikethrough"])
    out: list[Token] = []
    for token in renderer.parse(markdown):
        out += [token, *(token.children or [])]
    return out


def table_rows(tokens: list[Token]) -> list[list[list[Token]]]:
    """Each table row's cells, each cell its inline tokens."""
    rows: list[list[list[Token]]] = []
    in_cell = False
    for token in tokens:
        if token.type == "tr_open":
            rows.append([])
        elif token.type in ("th_open", "td_open"):
            rows[-1].append([])
            in_cell = True
        elif token.type in ("th_close", "td_close"):
            in_cell = False
        elif in_cell and token.type != "inline":
            rows[-1][-1].append(token)
    return rows


def shown(name: str) -> str:
    """How a name reads in the comment: on one line."""
    return name.replace("\n", "⏎")


@pytest.fixture
def hostile_report(sqlite_url: str) -> str:
    base = [cell(name, "pass") for name in HOSTILE] + [cell(LAST, "fail")]
    head = [cell(name, "fail") for name in HOSTILE] + [cell(LAST, "pass"),
                                                       cell("b", "fail", backend="torch-rev|<b>@evil</b>")]
    fingerprints = {name: "1" for name in [*HOSTILE, LAST, "b"]}
    return render(report_of(sqlite_url, head, fingerprints, base, fingerprints, pr_number=PR), RUN_URL)


def test_hostile_scenario_names_render_as_text_and_the_report_stays_whole(hostile_report: str) -> None:
    tokens = parsed(hostile_report)
    kinds = [token.type for token in tokens]
    assert kinds.count("heading_open") == 1  # "gradci report"; no name makes another
    assert [t.attrs.get("href") for t in tokens if t.type == "link_open"] == [RUN_URL]
    assert "image" not in kinds and "html_inline" not in kinds
    assert [t.content.strip() for t in tokens if t.type == "html_block"] == [MARKER]
    outside_code = " ".join(t.content for t in tokens if t.type == "text")
    assert not re.search(r"@\w|#\d", outside_code), outside_code  # no mention, no issue reference

    code = [t.content for t in tokens if t.type == "code_inline"]
    for name in HOSTILE:
        assert shown(name) in code, name
    rows = table_rows(tokens)
    regressions = [row for row in rows if row and row[0] and row[0][0].type == "code_inline"
                   and row[0][0].content in map(shown, HOSTILE)]
    assert len(regressions) == len(HOSTILE)
    for row in regressions:  # each name kept to its own cell: the row's columns are where they belong
        assert len(row) == 9 and [t.content for t in row[1]] == ["torch-rev"]
        assert "".join(t.content for t in row[4]) == "pass → fail"
    assert "torch-rev|<b>@evil</b>" in code
    # Everything after the names is still there: the fixes section, its one row, the end of the table.
    assert "Fixes" in outside_code and LAST in code
    assert any(row[0] and row[0][0].content == LAST and "".join(t.content for t in row[4]) == "fail → pass"
               for row in rows)


def test_an_annotation_keeps_each_failing_cell_to_one_line(sqlite_url: str) -> None:
    """Annotations are plain text on GitHub: no markup to escape, but a line break in a name or a
    message would write a line that reads as another cell's."""
    name = "a/poly\n✅ every cell passes"
    forged = "boom\ntorch-rev · cpu · float32: pass: all good"
    with session_scope(sqlite_url) as session:
        run = create_run(session)
        upsert_results(session, run.id, [stored_cell({**cell(name, "fail"), "message": forged})])
        session.add(ScenarioCatalogEntry(run_id=run.id, name=name, operator="gradient", fingerprint="1", tags=[],
                                         file="scenarios.py", line=3))
        session.flush()
        [annotation] = failing_scenario_annotations(session, run.id)
    assert annotation.title == "a/poly⏎✅ every cell passes: 1 failing cell"
    assert annotation.message == "torch-rev · cpu · float64: fail: boom⏎torch-rev · cpu · float32: pass: all good"
