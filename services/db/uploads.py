"""Upload runs in the database, and when they close.

An upload run is the run of one repository at one commit that the project's own CI uploads cells to,
shard by shard.

An upload run is open until its ``Upload.closed_at`` is set — by ``close``, a conditional update
that exactly one caller wins, whether two API processes store the last two shards at once or the
sweeper finds its wait over at the same moment. The winner sends the run's one finalisation
(``finalize_run``, the path every run finishes by); until then ``finalize_run`` leaves it alone.
Locks are taken upload first, then run.

Functions flush but never commit: the caller owns the transaction.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator, Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import and_, delete, exists, select, update
from sqlalchemy.orm import Session

from gradci.scenarios.contract.cell import KEY_FIELDS
from gradci.services.db.cell_records import CellRecordsBuffer
from gradci.services.db.models import (
    FINISHED_RUN_VALUES,
    CellPower,
    CoveredLines,
    GitHubReport,
    Repository,
    Result,
    RuleReach,
    Run,
    RunStatus,
    Trigger,
    Upload,
    UploadShard,
    database_now,
    utcnow,
)
from gradci.services.db.results import upsert_results
from gradci.services.db.runs import create_run, lock_for_transaction, lock_run
from gradci.services.db.upsert import rows_matched


class UploadRunFinished(Exception):
    """The commit's upload run already finished (or is finishing): it takes no more cells."""

    def __init__(self, run_id: int) -> None:
        super().__init__(f"the upload run of this commit (run {run_id}) has closed: its report is out or on its way")
        self.run_id = run_id


@dataclasses.dataclass(frozen=True)
class Commit:
    """What an upload says about the commit its cells were checked at (from the CI's variables)."""

    sha: str
    base_sha: str | None = None
    ref: str | None = None
    pr_number: int | None = None
    config: dict[str, Any] = dataclasses.field(default_factory=dict)  # gradci.toml's tables the report reads


@dataclasses.dataclass(frozen=True)
class ShardStored:
    run_id: int
    created: bool  # the commit's first upload: its run was made now
    cells: int
    arrived: list[str]
    expected: list[str]
    closed: bool  # this upload closed the run: the caller sends its finalisation


def open_upload(session: Session, repository: Repository, commit: Commit, wait_s: float) -> tuple[Upload, bool]:
    """The commit's upload, locked for the transaction, made with its run on the first upload (True).

    Raises ``UploadRunFinished`` when it no longer takes cells.
    """
    # Two first uploads of one commit at once: the second waits here, then finds the first's run.
    lock_for_transaction(session, f"upload:{repository.id}:{commit.sha}")
    upload = session.scalars(select(Upload).where(Upload.repository_id == repository.id,
                                                  Upload.head_sha == commit.sha).with_for_update()).one_or_none()
    if upload is None:
        run = create_run(session, repository=repository, head_sha=commit.sha, base_sha=commit.base_sha,
                         ref=commit.ref, pr_number=commit.pr_number, trigger=Trigger.upload.value)
        now = database_now(session)  # the deadline is judged by the sweep of any host: one clock for all
        run.status, run.started_at, run.config = RunStatus.running.value, now, dict(commit.config)
        if repository.full_name:  # statuses and the pull-request comment, as for a webhook's run
            session.add(GitHubReport(run_id=run.id, full_name=repository.full_name))
        upload = Upload(run_id=run.id, repository_id=repository.id, head_sha=commit.sha, expected_shards=[],
                        first_upload_at=now, deadline=now + timedelta(seconds=wait_s))
        session.add(upload)
        session.flush()
        return upload, True
    existing = lock_run(session, upload.run_id)
    if upload.closed_at is not None or existing is None or existing.status in FINISHED_RUN_VALUES:
        raise UploadRunFinished(upload.run_id)
    # A later shard may know what the first did not (the pull request, once it was opened).
    existing.base_sha, existing.ref = existing.base_sha or commit.base_sha, existing.ref or commit.ref
    existing.pr_number = existing.pr_number or commit.pr_number
    existing.config = existing.config or dict(commit.config)
    return upload, False


def store_shard(session: Session, repository: Repository, commit: Commit, shard: str, expect: Sequence[str],
                cells: Iterable[dict[str, Any]], wait_s: float, batch_size: int = 1000) -> ShardStored:
    """Store one shard's cells in the commit's upload run, replacing what the shard uploaded before.

    Close the run when every expected shard (``expect`` and those earlier uploads named) is in.
    ``cells`` may be a stream: they are stored ``batch_size`` at a time, never all held at once (an
    exception it raises leaves the transaction for the caller to roll back).
    """
    upload, created = open_upload(session, repository, commit, wait_s)
    upload.expected_shards = sorted({*upload.expected_shards, *expect})
    row = session.scalars(select(UploadShard).where(UploadShard.run_id == upload.run_id,
                                                    UploadShard.name == shard)).one_or_none()
    if row is None:
        row = UploadShard(run_id=upload.run_id, name=shard, cells=0, times_uploaded=1)
        session.add(row)
        session.flush()
    else:
        _forget_records(session, upload.run_id, row.id)
        session.execute(delete(Result).where(Result.run_id == upload.run_id, Result.shard_id == row.id))
        row.times_uploaded, row.received_at = row.times_uploaded + 1, utcnow()
    records = CellRecordsBuffer(upload.run_id, shard_part(row.id))
    row.cells = upsert_results(session, upload.run_id, _beside(session, records, cells, batch_size),
                               shard_id=row.id, batch_size=batch_size)
    records.store(session)
    arrived = arrived_shards(session, upload.run_id)
    closed = not missing_shards(upload.expected_shards, arrived) and close(session, upload.run_id)
    return ShardStored(run_id=upload.run_id, created=created, cells=row.cells, arrived=arrived,
                       expected=list(upload.expected_shards), closed=closed)


def shard_part(shard_id: int) -> str:
    """The part of a run an upload shard's covered lines are kept under (a job's are "job N")."""
    return f"shard {shard_id}"


def _beside(session: Session, records: CellRecordsBuffer, cells: Iterable[dict[str, Any]],
            batch_size: int) -> Iterator[dict[str, Any]]:
    """The cells without their rule-coverage and power records, which are stored every ``batch_size`` cells."""
    for count, cell in enumerate(cells, start=1):
        yield records.take(cell)
        if count % batch_size == 0:
            records.store(session)  # the upload's one transaction: "committed" only frees the buffer
            records.committed()


def _forget_records(session: Session, run_id: int, shard_id: int) -> None:
    """The rule reaches, power records and covered lines of the cells a shard uploaded before."""
    for table in (RuleReach, CellPower):
        same_cell = and_(Result.run_id == run_id, Result.shard_id == shard_id,
                         *(getattr(Result, name) == getattr(table, name) for name in KEY_FIELDS))
        session.execute(delete(table).where(table.run_id == run_id, exists().where(same_cell))
                        .execution_options(synchronize_session=False))
    session.execute(delete(CoveredLines).where(CoveredLines.run_id == run_id,
                                               CoveredLines.part == shard_part(shard_id)))


def arrived_shards(session: Session, run_id: int) -> list[str]:
    return sorted(session.scalars(select(UploadShard.name).where(UploadShard.run_id == run_id)))


def missing_shards(expected: Iterable[str], arrived: Iterable[str]) -> list[str]:
    """The expected shards not uploaded (none expected: the first upload is the whole run)."""
    return sorted(set(expected) - set(arrived))


def close(session: Session, run_id: int, now: datetime | None = None) -> bool:
    """Close the upload run; True for the one caller whose update closed it."""
    result = session.execute(update(Upload).where(Upload.run_id == run_id, Upload.closed_at.is_(None))
                             .values(closed_at=now or utcnow()).execution_options(synchronize_session=False))
    return rows_matched(result) == 1


def is_open(session: Session, run_id: int) -> bool:
    """An upload run still waiting for shards: nothing may finish it yet."""
    return bool(session.scalar(select(exists().where(Upload.run_id == run_id, Upload.closed_at.is_(None)))))


def missing_at_close(session: Session, run_id: int) -> list[str]:
    """The expected shards an upload run closed without (its wait ran out first); [] for other runs."""
    upload = session.get(Upload, run_id)
    return [] if upload is None else missing_shards(upload.expected_shards, arrived_shards(session, run_id))


def close_overdue(session: Session, *, limit: int) -> list[int]:
    """Close the open upload runs whose wait (GRADCI_UPLOAD_WAIT after the first upload) is over.

    Returns those this caller closed, whose finalisation it sends.
    """
    now = database_now(session)
    overdue = session.scalars(
        select(Upload.run_id).join(Run, Run.id == Upload.run_id)
        .where(Upload.closed_at.is_(None), Upload.deadline <= now, Run.status.not_in(FINISHED_RUN_VALUES))
        .order_by(Upload.deadline).limit(limit))
    return [run_id for run_id in list(overdue) if close(session, run_id, now)]


def closed_unfinished(session: Session, *, closed_before: datetime, limit: int) -> list[int]:
    """Upload runs closed before ``closed_before`` and still unfinished: their finalisation was lost."""
    return list(session.scalars(
        select(Upload.run_id).join(Run, Run.id == Upload.run_id)
        .where(Upload.closed_at < closed_before, Run.status.not_in(FINISHED_RUN_VALUES))
        .order_by(Upload.run_id).limit(limit)))
