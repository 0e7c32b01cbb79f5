"""Jobs whose worker died while running them go back to their queue.

Celery requeues a job whose pool process died, but not one whose whole worker died: Redis hands
it out again only after the visibility timeout, the embedded transport never. Every worker looks,
on each heartbeat, for running jobs of its queues whose worker stopped beating, and re-sends them;
the attempt counter still bounds how often a job can take a worker down.
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from services.db.jobs import orphaned_jobs, requeue_orphan
from services.db.models import Job
from services.db.session import session_scope
from services.settings import Settings

log = logging.getLogger(__name__)


def recover_orphaned_jobs(settings: Settings, queues: Sequence[str], send_job: Callable[[int, str], None]) -> list[int]:
    """Re-send this worker's share of orphaned jobs; returns their ids."""
    database = settings.database_url
    with session_scope(database, readonly=True) as session:
        candidates = orphaned_jobs(session, queues, online_within_s=settings.worker_online_s)
    recovered = []
    for job_id in candidates:
        with session_scope(database) as session:
            won = requeue_orphan(session, job_id)
            queue = session.get(Job, job_id).queue if won else None
        if queue is not None:
            log.warning("job %s lost its worker: sent again to %s", job_id, queue)
            send_job(job_id, queue)
            recovered.append(job_id)
    return recovered
