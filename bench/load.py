"""Load benchmarks against a local server, printed as figures (the machine is shared: they move).

``webhook_load``: signed ``pull_request`` deliveries at a steady rate to a real uvicorn server with
the real app on PostgreSQL and Redis. Each delivery is a pull request of its own with a head commit
of its own, all on one base commit, sent on schedule whether or not the earlier ones were answered
(an open loop: a slow server shows as latency, not as a lower rate). A Celery worker acts on the
stored deliveries meanwhile (``bench/intake_worker.py``: the worker's ``handle_delivery``, with the
plans and reports it sends counted instead of carried out), on the same machine; ``--act-after``
starts it only once every answer is in. Then: each delivery should be acknowledged within GitHub's
10 s; each acknowledged one must be acted on — stored with the run of its head commit, and that run
planned (none lost); no commit may have two runs and no run two plans (none duplicated) — the base
commit included, which every delivery finds missing at first.

Run: .venv/bin/python bench/load.py [--rate 100] [--seconds 30] [--workers 2] [--act-after]
         [--postgres-url ADMIN_URL (a database is created in it and dropped)] [--redis-url URL (flushed)]
"""
from __future__ import annotations

import argparse
import asyncio
import copy
import dataclasses
import hashlib
import json
import statistics
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import NamedTuple

import aiohttp
import httpx

from bench.intake_worker import PLANS
from gradci._testing.processes import free_port, service_env, spawn, stop, wait_for
from gradci.services.github.signature import sign

ROOT = Path(__file__).resolve().parent.parent

PAYLOADS = ROOT / "tests" / "data" / "github-payloads"  # data the tests share: read, never imported

SECRET = "bench-webhook-secret"
DEFAULT_POSTGRES = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
DEFAULT_REDIS = "redis://127.0.0.1:6379/15"
P99_TARGET_MS = 100
GITHUB_TIMEOUT_S = 10
ACT_TIMEOUT_S = 600  # for the worker to act on every acknowledged delivery


class WebhookDelivery(NamedTuple):
    delivery_id: str
    head_sha: str
    body: bytes
    headers: dict[str, str]


@dataclasses.dataclass(frozen=True)
class WebhookLoadFigures:
    offered_rate: float
    seconds: float                 # from the first send to the last answer
    latencies_ms: list[float]      # of the acknowledged deliveries
    answers: dict[int, int]        # HTTP status (0: no answer within GitHub's 10 s) → count
    lost: int                      # acknowledged, yet without their stored run or its plan
    duplicated: int                # runs beyond one per commit, plans beyond one per run
    acted_s: float                 # from the first send until the worker had acted on every acknowledged one
    act_after: bool = False        # the worker started only once every answer was in

    @property
    def sent(self) -> int:
        return sum(self.answers.values())

    @property
    def achieved_rate(self) -> float:
        return len(self.latencies_ms) / self.seconds if self.seconds else 0.0

    def percentile_ms(self, percent: int) -> float:
        if len(self.latencies_ms) < 2:
            return self.latencies_ms[0] if self.latencies_ms else float("nan")
        return statistics.quantiles(self.latencies_ms, n=100, method="inclusive")[percent - 1]

    def lines(self) -> list[str]:
        return [
            (f"sent {self.sent} signed pull_request deliveries at {self.offered_rate:g}/s; "
             f"answers {dict(sorted(self.answers.items()))}"),
            f"acknowledged {len(self.latencies_ms)} in {self.seconds:.1f} s = {self.achieved_rate:.1f}/s",
            (f"acknowledgement latency p50 {self.percentile_ms(50):.1f} ms, p95 {self.percentile_ms(95):.1f} ms, "
             f"p99 {self.percentile_ms(99):.1f} ms  (target p99 < {P99_TARGET_MS} ms)"),
            (f"acted on by the worker (runs stored and planned) {self.acted_s:.1f} s after the first send"
             f"{' (started after the last answer)' if self.act_after else ''}"),
            f"lost {self.lost}, duplicated {self.duplicated}  (target 0, 0)",
        ]


def pull_request_deliveries(count: int, secret: str = SECRET) -> list[WebhookDelivery]:
    """``count`` signed ``opened`` deliveries, pull requests 1..count, each with its own head commit."""
    template = json.loads((PAYLOADS / "pull_request.opened.json").read_text())
    deliveries = []
    for number in range(1, count + 1):
        body = copy.deepcopy(template)
        head_sha = hashlib.sha1(f"head {number}".encode()).hexdigest()
        body["number"] = body["pull_request"]["number"] = number
        body["pull_request"]["head"]["sha"] = head_sha
        raw = json.dumps(body).encode()
        delivery_id = str(uuid.uuid4())
        headers = {"X-GitHub-Event": "pull_request", "X-GitHub-Delivery": delivery_id,
                   "Content-Type": "application/json",
                   "X-Hub-Signature-256": sign(secret, raw)}
        deliveries.append(WebhookDelivery(delivery_id, head_sha, raw, headers))
    return deliveries


async def _send_on_schedule(url: str, deliveries: list[WebhookDelivery], rate: float) -> tuple[list[tuple[int, float]], float]:
    """(status, latency ms) per delivery, in order (status 0: no answer), and the seconds from the
    first send to the last answer. aiohttp, not httpx: at 100 requests a second httpx's client took
    more CPU per request than the server, on the same two cores."""
    # Idle connections are closed here before uvicorn's 5 s keep-alive closes them there: a request
    # sent on a connection the server is closing would fail for a reason of the client's making.
    connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=2)
    # GitHub gives up on a delivery not answered within 10 s: so does this client.
    timeout = aiohttp.ClientTimeout(total=GITHUB_TIMEOUT_S)
    async with aiohttp.ClientSession(url, connector=connector, timeout=timeout) as client:

        async def post(delivery: WebhookDelivery) -> tuple[int, float]:
            start = time.perf_counter()
            try:
                async with client.post("/webhooks/github", data=delivery.body, headers=delivery.headers) as response:
                    await response.read()
                    status = response.status
            except (aiohttp.ClientError, TimeoutError):
                status = 0
            return status, (time.perf_counter() - start) * 1000

        loop = asyncio.get_running_loop()
        first = loop.time()
        tasks = []
        for index, delivery in enumerate(deliveries):
            await asyncio.sleep(max(0.0, first + index / rate - loop.time()))
            tasks.append(asyncio.create_task(post(delivery)))
        answers = await asyncio.gather(*tasks)
        return answers, loop.time() - first


def _plans_by_run(redis_url: str) -> Counter[int]:
    """How many ``plan_run`` messages the bench worker received for each run."""
    import redis

    client = redis.Redis.from_url(redis_url)
    try:
        return Counter({int(run_id): int(count) for run_id, count in client.hgetall(PLANS).items()})
    finally:
        client.close()


def _unacted(database_url: str, acknowledged: list[WebhookDelivery]) -> int:
    """How many acknowledged deliveries the worker has not acted on yet (or not yet planned)."""
    from sqlalchemy import select

    from gradci.services.db.models import Delivery
    from gradci.services.db.session import session_scope

    with session_scope(database_url, readonly=True) as session:
        acted = set(session.scalars(select(Delivery.delivery_id).where(Delivery.processed_at.is_not(None))))
    return sum(1 for delivery in acknowledged if delivery.delivery_id not in acted)


def lost_and_duplicated(database_url: str, redis_url: str, acknowledged: list[WebhookDelivery]) -> tuple[int, int]:
    """(acknowledged deliveries without their stored run or its plan, runs beyond one per commit and
    plans beyond one per run). A delivery GitHub saw fail (an error, or no answer in time) is not
    lost whatever became of it: GitHub shows it as failed, to be redelivered."""
    from sqlalchemy import select

    from gradci.services.db.models import Delivery, Run
    from gradci.services.db.session import session_scope

    with session_scope(database_url, readonly=True) as session:
        stored = dict(session.execute(select(Delivery.delivery_id, Delivery.run_id)).all())
        runs = dict(session.execute(select(Run.id, Run.head_sha)).all())
    plans = _plans_by_run(redis_url)
    handled = [d for d in acknowledged if runs.get(stored.get(d.delivery_id)) == d.head_sha
               and plans[stored[d.delivery_id]] >= 1]
    runs_per_commit = Counter(runs.values())
    duplicated = sum(n - 1 for n in runs_per_commit.values()) + sum(n - 1 for n in plans.values())
    return len(acknowledged) - len(handled), duplicated


def wait_acted_on(database_url: str, redis_url: str, acknowledged: list[WebhookDelivery]) -> None:
    """Until the worker has acted on every acknowledged delivery and its plans arrived (or the
    timeout: what is missing then counts as lost)."""
    def done() -> bool:
        return _unacted(database_url, acknowledged) == 0 and lost_and_duplicated(
            database_url, redis_url, acknowledged)[0] == 0

    try:
        wait_for(done, "the worker to act on every acknowledged delivery", timeout_s=ACT_TIMEOUT_S, interval_s=0.5)
    except AssertionError:
        pass


@contextmanager
def intake_worker(database_url: str, redis_url: str, workdir: Path, concurrency: int = 2) -> Iterator[None]:
    """``bench/intake_worker.py``: a Celery worker acting on the stored deliveries, once it consumes;
    stopped on exit."""
    env = service_env(database_url=database_url, broker_url=redis_url, workdir=str(workdir))
    ready = workdir / "intake_worker.ready"
    process = spawn([sys.executable, str(ROOT / "bench" / "intake_worker.py"), str(concurrency), str(ready)], env,
                    workdir / "intake_worker.log")
    try:
        # Started before the load: its start-up (seconds of CPU) must not land on the first deliveries.
        wait_for(ready.exists, "the worker to consume", timeout_s=90, interval_s=0.1)
        yield
    finally:
        stop(process)


@dataclasses.dataclass(frozen=True)
class Server:
    url: str
    pid: int  # with one worker, the process that serves; with several, their parent


@contextmanager
def api_server(database_url: str, redis_url: str, workdir: Path, workers: int = 1,
               **environment: str) -> Iterator[Server]:
    """The real app under uvicorn (``workers`` processes) with the webhook secret ``SECRET``; stopped
    on exit. ``environment`` adds variables (``TMPDIR``, say)."""
    port = free_port()
    env = service_env(database_url=database_url, broker_url=redis_url, workdir=str(workdir),
                      github_webhook_secret=SECRET) | environment
    process = spawn([sys.executable, "-m", "uvicorn", "--factory", "gradci.services.api.app:create_app",
                     "--host", "127.0.0.1", "--port", str(port), "--workers", str(workers),
                     "--log-level", "warning", "--no-access-log"], env, workdir / "api.log")
    server = Server(f"http://127.0.0.1:{port}", process.pid)
    try:
        wait_for(lambda: _healthy(server.url), "the API to answer", timeout_s=90)
        yield server
    finally:
        stop(process)


def _healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/api/health", timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


def webhook_load(database_url: str, redis_url: str, rate: float = 100, seconds: float = 30,
                 workers: int = 2, act_after: bool = False) -> WebhookLoadFigures:
    """Deliver ``rate × seconds`` signed pull requests to a fresh server on an empty, migrated
    database and an empty Redis database, have a worker act on them, and count what was stored,
    acted on and planned."""
    deliveries = pull_request_deliveries(round(rate * seconds))
    with tempfile.TemporaryDirectory(prefix="gradci-load-") as workdir, \
            api_server(database_url, redis_url, Path(workdir), workers) as server, ExitStack() as worker:
        if not act_after:
            worker.enter_context(intake_worker(database_url, redis_url, Path(workdir)))
        started = time.monotonic()
        answers, elapsed = asyncio.run(_send_on_schedule(server.url, deliveries, rate))
        acknowledged = [delivery for delivery, (status, _) in zip(deliveries, answers) if 200 <= status < 300]
        if act_after:
            worker.enter_context(intake_worker(database_url, redis_url, Path(workdir)))
        wait_acted_on(database_url, redis_url, acknowledged)
        acted_s = time.monotonic() - started
    lost, duplicated = lost_and_duplicated(database_url, redis_url, acknowledged)
    return WebhookLoadFigures(
        offered_rate=rate, seconds=elapsed, lost=lost, duplicated=duplicated, acted_s=acted_s, act_after=act_after,
        latencies_ms=[latency for status, latency in answers if 200 <= status < 300],
        answers=dict(Counter(status for status, _ in answers)))


@contextmanager
def scratch_databases(postgres_admin_url: str, redis_url: str) -> Iterator[str]:
    """A new migrated PostgreSQL database (dropped on exit) and the Redis database emptied."""
    import redis

    from gradci._testing.databases import scratch_database

    redis.Redis.from_url(redis_url).flushdb()
    with scratch_database(postgres_admin_url, "gradci_load") as url:
        yield url


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=float, default=100, help="deliveries per second (default 100)")
    parser.add_argument("--seconds", type=float, default=30, help="for how long (default 30)")
    parser.add_argument("--workers", type=int, default=2, help="uvicorn worker processes (default 2)")
    parser.add_argument("--act-after", action="store_true",
                        help="start the worker that acts on the deliveries only once every answer is in")
    parser.add_argument("--postgres-url", default=DEFAULT_POSTGRES, help="an admin URL of a PostgreSQL cluster")
    parser.add_argument("--redis-url", default=DEFAULT_REDIS, help="a Redis database of its own: it is flushed")
    args = parser.parse_args()
    with scratch_databases(args.postgres_url, args.redis_url) as database_url:
        figures = webhook_load(database_url, args.redis_url, args.rate, args.seconds, args.workers, args.act_after)
    print(f"webhook load: uvicorn × {args.workers} workers, PostgreSQL + Redis, no access log")
    for line in figures.lines():
        print(line)


if __name__ == "__main__":
    main()
