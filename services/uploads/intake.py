"""One upload, from its authenticated body to the stored shard and the messages it owes.

Refusals store nothing: the body's header is parsed and checked (422), the credential's repository,
commit and pull request are checked (403), and only then is anything written — the repository, the
run, the shard and its cells (with their rule-coverage and power records) and the checkout's rules in one
transaction, as the scenarios, cells and rules stream out of the body
(``stream``): a bad one (422) or a run that already finished (409) rolls it all back.
"""
from __future__ import annotations

import logging
from typing import IO

from pydantic import BaseModel, Field
from sqlalchemy import update

from gradci.services.broker import dispatch
from gradci.services.db.jobs import record_catalog
from gradci.services.db.models import UploadToken, utcnow
from gradci.services.db.rules import record_rules
from gradci.services.db.runs import get_or_create_repository
from gradci.services.db.session import sessionmaker_for
from gradci.services.db.uploads import Commit, ShardStored, UploadRunFinished, store_shard
from gradci.services.repo_refs import parse_repo_ref
from gradci.services.settings import Settings
from gradci.services.uploads import stream
from gradci.services.uploads.access import Credential, Forbidden, Unavailable, authorize
from gradci.services.uploads.schema import UploadHeader

log = logging.getLogger(__name__)


class UploadAccepted(BaseModel):
    run_id: int
    url: str = Field(description="the run's dashboard page")
    shard: str
    cells: int = Field(description="cells stored for this shard (its earlier upload's replaced)")
    arrived: list[str] = Field(description="the shards uploaded so far")
    expected: list[str] = Field(description="the shards the run waits for")
    finishing: bool = Field(description="every expected shard is in: the run's report is on its way")


def receive(settings: Settings, credential: Credential, raw: IO[bytes], dashboard: str) -> tuple[int, dict]:
    """(HTTP status, body) for an authenticated upload; ``dashboard``: the base of run pages."""
    try:
        upload = stream.read_header(raw)
    except stream.InvalidUpload as exc:
        return 422, {"detail": exc.errors}
    try:
        authorize(settings, credential, upload.repository, upload.sha, upload.pr)
    except Forbidden as exc:
        return 403, {"detail": str(exc)}
    except Unavailable as exc:
        return 503, {"detail": str(exc)}
    try:
        stored = store(settings, credential, upload, raw)
    except stream.InvalidUpload as exc:
        return 422, {"detail": exc.errors}
    except UploadRunFinished as exc:
        return 409, {"detail": str(exc)}
    announce(settings, stored)
    return 202, UploadAccepted(run_id=stored.run_id, url=f"{dashboard.rstrip('/')}/runs/{stored.run_id}",
                               shard=upload.shard, cells=stored.cells, arrived=stored.arrived,
                               expected=stored.expected or stored.arrived, finishing=stored.closed).model_dump()


def store(settings: Settings, credential: Credential, upload: UploadHeader, raw: IO[bytes]) -> ShardStored:
    """The shard, its scenarios and cells read from ``raw`` as they are stored, in one transaction."""
    ref = parse_repo_ref(upload.repository, settings.clone_url_template)
    commit = Commit(sha=upload.sha, base_sha=upload.base_sha, ref=upload.branch, pr_number=upload.pr,
                    config=upload.config())
    with sessionmaker_for(settings.database_url)() as session:  # closed uncommitted: rolled back
        repository = get_or_create_repository(session, ref.url, ref.full_name)
        stored = store_shard(session, repository, commit, upload.shard, upload.expect_shards or [],
                             stream.cell_rows(raw), settings.upload_wait, batch_size=stream.CELLS_AT_ONCE)
        for batch in stream.batches(stream.scenarios(raw), stream.CELLS_AT_ONCE):
            record_catalog(session, stored.run_id, batch)
        for rules in stream.batches(stream.rules(raw), stream.CELLS_AT_ONCE):
            record_rules(session, stored.run_id, [rule.entry() for rule in rules])
        if credential.token_id is not None:
            session.execute(update(UploadToken).where(UploadToken.id == credential.token_id)
                            .values(last_used_at=utcnow()))
        session.commit()
    return stored


def announce(settings: Settings, stored: ShardStored) -> None:
    """Send the run's one finalisation, which publishes the report, when this upload closed it.

    Called after the commit. A message the broker refuses is not lost: the reconciler sends a closed
    run's finalisation again. (A run that waits for shards longer than GRADCI_REPORT_RETRY_BASE_S shows
    pending statuses meanwhile, sent by the report sweeper: the run's report row is owed from the first
    upload.)
    """
    if not stored.closed:
        return
    try:
        dispatch.submit_finalize(stored.run_id, settings)
    except dispatch.DispatchError as exc:
        log.warning("upload run %s: its finalisation is left to the reconciler: %s", stored.run_id, exc)
