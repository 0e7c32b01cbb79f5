"""A run as a GitHub check run (App mode).

``in_progress`` from the start, linking to the run page; ``completed`` with a conclusion, the report
as its summary and an annotation per failing scenario. GitHub takes at most 50 annotations per
request and appends those of each update, so the rest go in further updates, each repeating the
output's title and summary as GitHub requires.
"""
from __future__ import annotations

from collections.abc import Sequence

from gradci.services.github.client import GitHubClient, truncate
from gradci.services.reports.annotations import Annotation

CHECK_NAME = "gradci"
UPLOAD_CHECK_NAME = "gradci/upload"  # results a project's CI uploaded: never in the service's own check
ANNOTATIONS_PER_REQUEST = 50
SUMMARY_LIMIT = 65535  # GitHub's limit on a check run's output summary
TITLE_LIMIT = 255  # a title is one line on the page: a long scenario name is cut


def start(client: GitHubClient, full_name: str, head_sha: str, run_id: int, details_url: str | None,
          title: str, name: str = CHECK_NAME) -> int:
    """Create the run's check run, in progress; its id."""
    body: dict[str, object] = {"name": name, "head_sha": head_sha, "status": "in_progress",
                               "external_id": str(run_id), "output": {"title": title, "summary": title}}
    if details_url:
        body["details_url"] = details_url
    return int(client.request("POST", f"/repos/{full_name}/check-runs", json=body).json()["id"])


def complete(client: GitHubClient, full_name: str, check_run_id: int, conclusion: str, title: str,
             summary: str, annotations: Sequence[Annotation]) -> None:
    """Complete the check run; ``annotations`` in batches of 50, the first with the conclusion."""
    summary = truncate(summary, SUMMARY_LIMIT)
    batches = [annotations[i:i + ANNOTATIONS_PER_REQUEST] for i in range(0, len(annotations), ANNOTATIONS_PER_REQUEST)]
    path = f"/repos/{full_name}/check-runs/{check_run_id}"
    for index, batch in enumerate(batches or [()]):
        body: dict[str, object] = {"output": {"title": title, "summary": summary,
                                              "annotations": [a.to_github() for a in batch]}}
        if index == 0:
            body |= {"status": "completed", "conclusion": conclusion}
        client.request("PATCH", path, json=body)


def update(client: GitHubClient, full_name: str, check_run_id: int, title: str, summary: str) -> None:
    """Send a completed check run's output again, without annotations.

    Its report changed once its base run finished. No annotations: GitHub would add them a second time.
    """
    client.request("PATCH", f"/repos/{full_name}/check-runs/{check_run_id}",
                   json={"output": {"title": title, "summary": truncate(summary, SUMMARY_LIMIT)}})


def progress(client: GitHubClient, full_name: str, check_run_id: int, title: str, summary: str) -> None:
    """Show what a running run found so far on its check run, which stays in progress.

    Its status is not sent: an update that arrives after the run was completed must not reopen it.
    """
    output = {"title": truncate(title, TITLE_LIMIT), "summary": truncate(summary, SUMMARY_LIMIT)}
    client.request("PATCH", f"/repos/{full_name}/check-runs/{check_run_id}", json={"output": output})


def refuse(client: GitHubClient, full_name: str, head_sha: str, why: str) -> None:
    """Post a completed check run saying why gradci runs nothing of this commit.

    The repository is not registered. Its conclusion is ``action_required``, the one conclusion that
    asks its owner to act.
    """
    client.request("POST", f"/repos/{full_name}/check-runs", json={
        "name": CHECK_NAME, "head_sha": head_sha, "status": "completed", "conclusion": "action_required",
        "output": {"title": "Not run: this repository is not registered", "summary": truncate(why, SUMMARY_LIMIT)}})
