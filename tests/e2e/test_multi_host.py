"""Workers on other machines (issue 18, item 3): worker hosts that share only PostgreSQL and Redis over
the network with the servers' host, and no disk.

The hosts are network namespaces on this machine (``tests.support.netns``), each joined to a bridge
by a veth pair, with its own hostname, workdir (mirrors, checkouts, runner caches), HOME and
caches. The servers' host is the root namespace: private PostgreSQL and Redis
(``tests.support.faults``) listening on the bridge's address, ``gradci api``, and a git daemon from
which every host clones the repository it checks. Workers are started through the production
entry point, ``gradci worker``, inside their host.

- A run spread over two hosts lands every cell once, each host checking out the commit itself.
- A host whose link is cut mid-job (``ip link set … down``) loses the job after its lease; the
  other host finishes it. When the link comes back, the cut-off host duplicates nothing and does
  not overwrite the cells the other host stored.
- A host whose clock is off by minutes, ahead or behind, takes back no live job, and no live job
  of its own is taken back: leases and heartbeats are written and judged by the database's clock.

Heartbeats (0.5 s), leases (3 s) and the reconciler's grace (3 s) are shortened through the
settings, as in ``test_faults.py``: recovery takes seconds, as it takes minutes with the defaults.
"""
from __future__ import annotations

import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gradci._testing.processes import wait_for
from gradci._testing.service import assert_each_cell_once, health, jobs_of, results_of
from gradci.services.db.models import Job, Result
from gradci.worker.tasks import SETTLE_BEATS
from tests.support import faults, netns
from tests.support.netns import WORKER_LOG, Host, HostsService, host_of, hosts_service, skewed_clock

_unavailable = netns.available() or faults.available()
pytestmark = [pytest.mark.integration, pytest.mark.slow,
              pytest.mark.skipif(_unavailable is not None, reason=f"test hosts cannot run here: {_unavailable}")]

SCENARIOS = "slow/*"  # tests/data/projects/faults: 6 one-cell scenarios of about a second each
CELLS = 6
HEARTBEAT_S = 0.5
SETTINGS = dict(job_chunk_size="3", job_balance="false", cell_timeout_s="60", max_job_attempts="3",
                worker_heartbeat_s=str(HEARTBEAT_S), worker_online_s="3",
                reconcile_grace_s="3")  # so a run is 2 jobs of 3 cells, one per host, whatever ran before
SKEW_S = 300  # five minutes, a hundred leases
RUN_TIMEOUT_S = 120


@pytest.fixture(scope="module")
def service() -> Iterator[HostsService]:
    with hosts_service("faults", ("a", "b"), **SETTINGS) as running:
        yield running


def finished(service: HostsService, run_id: int) -> dict[str, Any]:
    try:
        return service.api.wait_finished(run_id, timeout_s=RUN_TIMEOUT_S)
    except AssertionError:
        print(service.logs())
        raise


def stored(service: HostsService, run_id: int) -> dict[tuple[str, str, str, str], dict[str, Any]]:
    """Every stored cell of the run, all its columns, by its key."""
    columns = [column.key for column in Result.__table__.columns]
    return {(r.scenario, r.backend, r.device, r.dtype): {name: getattr(r, name) for name in columns}
            for r in results_of(service.database_url, run_id)}


def assert_every_cell_once(service: HostsService, run_id: int) -> None:
    results = results_of(service.database_url, run_id)
    assert_each_cell_once(results)
    assert len(results) == CELLS and {r.status for r in results} == {"pass"}, [(r.scenario, r.status) for r in results]


def hosts_of(jobs: list[Job]) -> set[str | None]:
    return {host_of(job) for job in jobs}


def test_a_run_spread_over_two_hosts_lands_every_cell_once(service: HostsService) -> None:
    run_id = service.submit(scenarios=SCENARIOS)
    run = finished(service, run_id)
    assert run["status"] == "passed", run
    assert_every_cell_once(service, run_id)
    jobs = jobs_of(service.database_url, run_id)
    assert len(jobs) == 2 and {job.status for job in jobs} == {"done"} and {job.attempts for job in jobs} == {1}
    assert hosts_of(jobs) == {"host-a", "host-b"}, [(job.id, job.worker) for job in jobs]
    for name in ("a", "b"):  # each host fetched the commit over the network into its own workdir
        workdir = service.host(name).workdir
        assert (workdir / "checkouts" / service.sha / "fault_scenarios.py").is_file(), name
        assert [mirror.name for mirror in (workdir / "mirrors").glob("*.git")], name


def mid_job(service: HostsService, run_id: int, host: Host) -> Job | None:
    """``host``'s running job of the run once some of its cells are stored and some are not."""
    for job in jobs_of(service.database_url, run_id):
        if job.status == "running" and host_of(job) == host.hostname:
            done = sum(1 for r in results_of(service.database_url, run_id) if r.job_id == job.id)
            if 0 < done < len(job.scenarios or ()):
                return job
    return None


def test_a_host_cut_off_mid_job_loses_it_to_the_other_and_overwrites_nothing_when_back(
        service: HostsService) -> None:
    a, b = service.host("a"), service.host("b")
    run_id = service.submit(scenarios=SCENARIOS)
    job = wait_for(lambda: mid_job(service, run_id, a), "host a in the middle of a job", timeout_s=60, interval_s=0.05)
    cut_off_delivery = job.delivery
    a.cut()
    try:
        run = finished(service, run_id)  # host b took the job back after its lease and finished it
        assert run["status"] == "passed", run
        assert_every_cell_once(service, run_id)
        taken = {j.id: j for j in jobs_of(service.database_url, run_id)}[job.id]
        assert (taken.status, taken.attempts, host_of(taken)) == ("done", 2, b.hostname), taken.worker
        before = stored(service, run_id)
    finally:
        a.restore()
    # Host a comes back: the task it was running when cut off ends, and its worker beats again.
    wait_for(lambda: re.search(rf"run_job\[{cut_off_delivery}\] (succeeded|raised)", a.log(WORKER_LOG)),
             "host a's cut-off task to end once its link is back", timeout_s=150)
    wait_for(lambda: (health(service.api.url) or {}).get("workers_online", {}).get("cpu") == 2,
             "host a to beat again", timeout_s=60)
    assert f"run_job[{cut_off_delivery}] raised" not in a.log(WORKER_LOG)
    after = stored(service, run_id)
    assert after.keys() == before.keys()  # nothing duplicated
    overwritten = {key: {name: (before[key][name], after[key][name]) for name in after[key]
                         if after[key][name] != before[key][name]} for key in after if after[key] != before[key]}
    assert overwritten == {}, "the host that came back overwrote cells the other host stored"
    assert sorted((j.status, j.attempts) for j in jobs_of(service.database_url, run_id)) == [("done", 1), ("done", 2)]


def clock_of(host: Host, clock: Path) -> float:
    """Seconds the host's clock (with ``clock`` preloaded) is ahead of this process's."""
    shown = subprocess.run(host.command(["date", "+%s"]), env=host.environment({"PATH": "/usr/bin:/bin"}, clock),
                           capture_output=True, text=True, check=True, timeout=30).stdout
    return float(shown) - time.time()


@pytest.mark.skipif(shutil.which("cc") is None, reason="a skewed clock is compiled: no C compiler (cc)")
@pytest.mark.parametrize("offset_s", [SKEW_S, -SKEW_S], ids=["ahead", "behind"])
def test_a_host_whose_clock_is_off_by_minutes_takes_back_no_live_job(service: HostsService, offset_s: int) -> None:
    """Judged by a worker's own clock, a host ahead sees every other host's heartbeats and leases as
    minutes old: it believes itself the one worker left to reconcile and takes their live jobs back.
    A host behind writes heartbeats and leases minutes old: the host that reconciles takes its live
    jobs back. Judged by the database's clock, neither happens. The clock is the host's own
    (``skewed_clock``: the realtime clock of all its processes, not a setting of gradci's)."""
    a = service.host("a")
    clock = skewed_clock(a.folder, offset_s)
    assert clock_of(a, clock) == pytest.approx(offset_s, abs=5)
    try:
        service.start_worker(a, clock)
        time.sleep((SETTLE_BEATS + 1) * HEARTBEAT_S)  # its chores begin: it may be the one reconciling
        marks = {host.name: len(host.log(WORKER_LOG)) for host in service.network.hosts}
        run_id = service.submit(scenarios=SCENARIOS)
        run = finished(service, run_id)
        jobs = jobs_of(service.database_url, run_id)
        assert run["status"] == "passed", (run["error_message"], [(job.id, job.attempts, job.message) for job in jobs])
        assert_every_cell_once(service, run_id)
        assert hosts_of(jobs) == {"host-a", "host-b"}, [(job.id, job.worker) for job in jobs]
        assert {(job.status, job.attempts) for job in jobs} == {("done", 1)}, [(job.id, job.attempts) for job in jobs]
        for host in service.network.hosts:
            assert "lost its worker" not in host.log(WORKER_LOG)[marks[host.name]:], host.name
    finally:
        service.start_worker(a)  # its clock right again
