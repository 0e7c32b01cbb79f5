"""The pull request's one comment, with a section per source of results.

The sources are what gradci's own workers checked in their sandbox, and what the project's CI
uploaded with its credential. Each section is rendered from its own run, so publishing one source's
report rewrites the other's section from the database, never from anything the publishing run says:
an upload cannot change the service's verdict.
"""
from __future__ import annotations

from collections.abc import Callable

from sqlalchemy import select
from sqlalchemy.orm import Session

from gradci.services.db.models import Run, RunStatus, Trigger, UploadShard
from gradci.services.github.client import truncate
from gradci.services.github_limits import COMMENT_BODY_LIMIT
from gradci.services.reports.markdown import MARKER, render
from gradci.services.reports.run_report import report_for_run, waiting_for_base

# Each section gets half the comment, less room for the labels: two sections still fit GitHub's limit.
SECTION_LIMIT = COMMENT_BODY_LIMIT // 2 - 1024
FINISHED = (RunStatus.passed.value, RunStatus.failed.value)


def is_upload(run: Run) -> bool:
    return run.trigger == Trigger.upload.value


def _label(session: Session, run: Run) -> str:
    if not is_upload(run):
        return ("## Checked by gradci\n\nOn gradci's own workers, in its sandbox "
                "(commit statuses `gradci/project` and `gradci/patch`).")
    shards = session.scalars(select(UploadShard.name).where(UploadShard.run_id == run.id).order_by(UploadShard.name))
    # Shard names match [A-Za-z0-9_.:+-]: no backtick can close their code spans.
    named = ", ".join(f"`{name}`" for name in shards) or "none"
    return ("## Uploaded by the project's CI\n\nResults the project's own CI checked and uploaded with its "
            f"credential (shards {named}): gradci did not run this code "
            "(commit statuses `gradci/upload/project` and `gradci/upload/patch`).")


def _other_source(session: Session, run: Run) -> Run | None:
    """The latest run of the other source on the same pull request and commit, if any."""
    uploaded = Run.trigger == Trigger.upload.value
    return session.scalars(select(Run).where(
        Run.repository_id == run.repository_id, Run.head_sha == run.head_sha, Run.pr_number == run.pr_number,
        uploaded if not is_upload(run) else ~uploaded).order_by(Run.id.desc()).limit(1)).first()


def _rendered(session: Session, run: Run, url: str | None) -> str:
    """``run``'s report as markdown, or a line saying where it stands."""
    if run.status == RunStatus.skipped.value:
        return f"**Nothing was checked** in run {run.id}: every cell was skipped or no worker could run it."
    if run.status not in FINISHED:
        return f"Run {run.id} is {run.status}: its report follows when it is done."
    if waiting_for_base(session, run) is not None:
        return f"Run {run.id} is done; its report waits for the base commit's run."
    return render(report_for_run(session, run), url)


def _section(session: Session, run: Run, body: str) -> str:
    return f"{_label(session, run)}\n\n{truncate(body.replace(MARKER, '').strip(), SECTION_LIMIT)}"


def comment_body(session: Session, run: Run, own: str, run_url: Callable[[int], str | None]) -> str:
    """The comment for ``run``'s pull request, a section per source, the service's first.

    ``own`` (``run``'s rendered report) goes in its source's section, and the other source's latest run
    of the same commit in its own.
    """
    sections = {is_upload(run): _section(session, run, own)}
    other = _other_source(session, run)
    if other is not None:
        sections[is_upload(other)] = _section(session, other, _rendered(session, other, run_url(other.id)))
    return "\n\n".join([MARKER, *(sections[source] for source in sorted(sections))])
