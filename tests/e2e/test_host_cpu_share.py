"""Test hosts with a share of the machine's CPUs (``tests.support.netns``): what the job-balance
bench's simulated hosts rely on to run as fast as hosts of that size.

- Every process of the host, and the processes they start, joins its cgroup, and together they get
  no more CPU time than the share, however many of them are busy.
- Closing the network removes the hosts' cgroups; one a killed test process left behind is swept
  when the next network is made.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import netns

_unavailable = netns.available() or (None if (netns.CPU_CGROUPS / "cpu.cfs_quota_us").is_file()
                                     else f"no cgroup v1 cpu hierarchy at {netns.CPU_CGROUPS}")
pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(_unavailable is not None, reason=f"test hosts cannot run here: {_unavailable}")]

SHARE = 0.1  # of a CPU: two busy processes on any machine get far more without the quota
BUSY_S = 2.0

# Busy for BUSY_S of wall time, in this process and in a child it starts; prints the CPU seconds both
# used, the wall time, and the child's cgroup of the cpu hierarchy.
BUSY = f"""
import json, resource, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c",
    "import time\\nend = time.monotonic() + {BUSY_S}\\nwhile time.monotonic() < end: pass\\n"
    "print(next(line for line in open('/proc/self/cgroup') if ':cpu,' in line or ':cpu:' in line"
    " or ',cpu:' in line).strip())"], stdout=subprocess.PIPE, text=True)
start = time.monotonic()
while time.monotonic() < start + {BUSY_S}:
    pass
cgroup = child.communicate()[0].strip()
wall = time.monotonic() - start
used = sum(getattr(resource.getrusage(who), field) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
           for field in ("ru_utime", "ru_stime"))
print(json.dumps({{"cpu_s": used, "wall_s": wall, "child_cgroup": cgroup}}))
"""


def test_a_host_and_what_it_starts_get_no_more_than_its_cpu_share(tmp_path: Path) -> None:
    with netns.host_network(tmp_path / "network", ["a"], cpus=SHARE) as network:
        host = network.hosts[0]
        assert host.cgroup is not None and host.cgroup.is_dir()
        process = host.spawn([sys.executable, "-c", BUSY], host.environment(dict(os.environ)), "busy.log")
        assert process.wait(timeout=120) == 0, host.log("busy.log")
        figures = json.loads(host.log("busy.log").strip().splitlines()[-1])
        throttled = dict(line.split() for line in (host.cgroup / "cpu.stat").read_text().splitlines())
        cgroup = host.cgroup
    assert figures["child_cgroup"].endswith(f"/{cgroup.name}"), figures
    assert int(throttled["nr_throttled"]) > 0, throttled
    # Two processes busy for the wall time: without the quota, up to two CPUs' worth.
    assert figures["cpu_s"] <= 2 * SHARE * figures["wall_s"], figures
    assert not cgroup.exists(), "the host's cgroup outlived its network"
    assert netns.leftovers(os.getpid()) == []


def test_a_cpu_share_a_killed_test_process_left_is_swept() -> None:
    gone = subprocess.Popen(["true"])
    gone.wait()
    stale = netns.CPU_CGROUPS / f"{netns.PREFIX}{gone.pid}z"
    stale.mkdir()
    try:
        netns.sweep_stale()
        assert not stale.exists()
    finally:
        if stale.exists():
            stale.rmdir()
