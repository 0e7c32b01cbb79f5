"""Test hosts on one machine, for what crosses a network: each host is a network namespace joined to a
bridge in the root namespace by a veth pair, with a hostname (a UTS namespace), a folder (workdir,
HOME, caches, temporary files, logs) and, if asked, a wall clock that is off by some seconds.

The root namespace is the servers' host: whatever listens on the bridge's address (``gateway``)
is reached from every host over its link, as over a network, and nothing else is shared but the
disk, which no host is told about (each has its own workdir and caches). ``Host.cut`` takes a
host's link down (``ip link set … down``, its cable pulled at the switch), ``Host.restore`` brings
it back.

A host may be given a share of the machine's CPUs (``cpus``: 0.5 is half a core), so that it runs
as fast as a host of that size whatever the other hosts do: a cgroup of the v1 ``cpu`` hierarchy with
that CFS quota, which its processes join as they start and their children inherit (the runner's own
cgroups are of the ``pids`` and ``memory`` hierarchies: it stays in its host's). On cgroup v2 a
runner's cgroup is made outside its host's, so there a share is refused.

A clock that is off: ``skewed_clock`` compiles a small preloaded library (``LD_PRELOAD``) that adds
the offset to the realtime clock (``clock_gettime(CLOCK_REALTIME…)``, ``gettimeofday``, ``time``)
of the host's processes, leaving the monotonic clocks alone, as a host whose clock is off has them.
Python's ``time.time()`` and ``datetime.now()`` read the realtime clock through these functions,
and so does every C program started with it; a sandboxed runner, whose ``/tmp`` is its own, cannot
load it (``ld.so`` says so in the worker's log) and keeps the machine's clock, which changes nothing
here: a runner never reads the database. (libfaketime 0.9.10, Debian's, cannot serve: it fakes the
monotonic clock too, and Python 3.11's timed waits then hang; with that switched off, ``time.sleep``
fails with EINVAL.)

Everything is removed at the end, also when the test failed: every process started in a host (its
whole tree, also those that left its process group, such as sandboxed runners), the namespaces,
the veth pairs, the bridge and the hosts' cgroups. Names carry the pid of the test process that made them, and what an
earlier test process left behind (it was killed) is swept when the next network is made.
"""
from __future__ import annotations

import contextlib
import dataclasses
import ipaddress
import os
import re
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from gradci._testing.processes import alive, descendants, free_port, service_env, spawn, stop, wait_for, wait_gone
from gradci._testing.service import GRADCI, TOKEN, Service, health, start_api
from gradci.services.db.models import Job, Worker
from gradci.services.db.session import dispose_engine, session_scope
from tests.support.faults import PrivatePostgres, PrivateRedis
from tests.support.projects import project_repository

PREFIX = "gcit"  # every namespace and link a test network makes: gcit<pid>, gcit<pid><host>
_OURS = re.compile(rf"^{PREFIX}(\d+)")
NETWORKS = ipaddress.IPv4Network("10.213.0.0/16")  # one /24 of it per test network
CPU_CGROUPS = Path("/sys/fs/cgroup/cpu")  # cgroup v1's cpu hierarchy: a host's CPU share
CFS_PERIOD_US = 100_000
STOP_GRACE_S = 5.0

CLOCK_SHIM = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stddef.h>
#include <sys/time.h>
#include <time.h>

static int (*real_clock_gettime)(clockid_t, struct timespec *);

int clock_gettime(clockid_t clock, struct timespec *now) {
    if (real_clock_gettime == NULL)
        real_clock_gettime = (int (*)(clockid_t, struct timespec *))dlsym(RTLD_NEXT, "clock_gettime");
    int answer = real_clock_gettime(clock, now);
    if (answer == 0 && (clock == CLOCK_REALTIME || clock == CLOCK_REALTIME_COARSE))
        now->tv_sec += OFFSET_S;
    return answer;
}

int gettimeofday(struct timeval *restrict tv, void *restrict tz) {
    struct timespec now;
    int answer = clock_gettime(CLOCK_REALTIME, &now);
    if (answer == 0 && tv != NULL) {
        tv->tv_sec = now.tv_sec;
        tv->tv_usec = now.tv_nsec / 1000;
    }
    return answer;
}

time_t time(time_t *out) {
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    if (out != NULL)
        *out = now.tv_sec;
    return now.tv_sec;
}
"""


def available() -> str | None:
    """Why test hosts cannot be made here, or None."""
    if os.geteuid() != 0:
        return "network namespaces and veth pairs need root"
    for tool in ("ip", "unshare", "hostname"):
        if shutil.which(tool) is None:
            return f"no `{tool}` (iproute2, util-linux)"
    return None


def _ip(*args: str, check: bool = True) -> str:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if check and done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout


def skewed_clock(folder: Path, offset_s: int) -> Path:
    """A library that, preloaded, sets the realtime clock of a process and its children ``offset_s``
    seconds off (see the module's docstring); compiled once per offset into ``folder``."""
    library = folder / f"clock{offset_s:+d}.so"
    if not library.exists():
        if shutil.which("cc") is None:
            raise RuntimeError("a skewed clock needs a C compiler (cc)")
        source = folder / "clock_shim.c"
        source.write_text(CLOCK_SHIM)
        subprocess.run(["cc", "-shared", "-fPIC", "-O2", f"-DOFFSET_S={offset_s}", "-o", str(library), str(source),
                        "-ldl"], check=True, capture_output=True, timeout=60)
    return library


@dataclasses.dataclass
class Host:
    """A test host: its namespace, its address on the test network, the root-namespace end of its
    link (a port of the bridge), its folder and the processes started in it."""
    name: str
    namespace: str
    address: str
    link: str
    folder: Path
    processes: list[subprocess.Popen[bytes]] = dataclasses.field(default_factory=list)
    cgroup: Path | None = None  # its CPU share's cgroup, if it has one

    @property
    def hostname(self) -> str:
        return f"host-{self.name}"

    @property
    def workdir(self) -> Path:
        return self.folder / "work"

    @property
    def logs(self) -> Path:
        return self.folder / "logs"

    def environment(self, base: dict[str, str], clock: Path | None = None) -> dict[str, str]:
        """``base`` with this host's own HOME, caches and temporary folder (and, with ``clock``, a
        library from ``skewed_clock`` preloaded)."""
        env = {**base, "HOME": str(self.folder / "home"), "XDG_CACHE_HOME": str(self.folder / "cache"),
               "TMPDIR": str(self.folder / "tmp")}
        env.pop("LD_PRELOAD", None)
        if clock is not None:
            env["LD_PRELOAD"] = str(clock)
        return env

    def command(self, argv: Sequence[str]) -> list[str]:
        """``argv`` run in this host: its network namespace, its hostname, its CPU share. Each step execs
        the next, so the process that runs ``argv`` is the one started."""
        command = ["ip", "netns", "exec", self.namespace, "unshare", "--uts", "sh", "-c", 'hostname "$0" && exec "$@"',
                   self.hostname, *argv]
        if self.cgroup is None:
            return command
        # Joined before entering the namespace: `ip netns exec` mounts a /sys of its own, without cgroups.
        return ["sh", "-c", f'echo $$ > {self.cgroup / "cgroup.procs"} && exec "$@"', "join", *command]

    def spawn(self, argv: Sequence[str], env: dict[str, str], log: str) -> subprocess.Popen[bytes]:
        """``argv`` in this host, in a session of its own, output appended to ``logs/<log>``."""
        process = spawn(self.command(argv), env, self.logs / log, cwd=self.folder)
        self.processes.append(process)
        return process

    def log(self, name: str) -> str:
        path = self.logs / name
        return path.read_text(errors="replace") if path.exists() else ""

    def cut(self) -> None:
        """Its link down, at the switch's end: nothing it sends arrives, nothing reaches it."""
        _ip("link", "set", self.link, "down")

    def restore(self) -> None:
        _ip("link", "set", self.link, "up")

    def stop(self, process: subprocess.Popen[bytes]) -> None:
        """``process`` and everything below it (also what left its process group: sandboxed runners)."""
        tree = descendants(process.pid)
        stop(process, grace_s=STOP_GRACE_S)
        _kill(alive(tree))
        wait_gone(tree, timeout_s=15)
        if process in self.processes:
            self.processes.remove(process)

    def stop_all(self) -> None:
        for process in list(self.processes):
            self.stop(process)
        # Anything else still in the namespace (a process a test started some other way).
        leftovers = {int(pid) for pid in _ip("netns", "pids", self.namespace, check=False).split()}
        _kill(leftovers)
        wait_gone(leftovers, timeout_s=15)


def _kill(pids: set[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


class HostNetwork:
    """A bridge in the root namespace (the servers' side, at ``gateway``) and the hosts on it."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.tag = f"{PREFIX}{os.getpid()}"
        self.bridge = self.tag
        self.subnet = _free_subnet()
        self.gateway = str(self.subnet.network_address + 1)
        self.hosts: list[Host] = []

    def open(self) -> None:
        _ip("link", "add", self.bridge, "type", "bridge")
        _ip("addr", "add", f"{self.gateway}/{self.subnet.prefixlen}", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")

    def add_host(self, name: str, cpus: float | None = None) -> Host:
        """A new host ``name`` (a letter, perhaps a second character) at the next address of the subnet,
        with ``cpus`` of the machine's CPUs if given."""
        assert re.fullmatch(r"[a-z][a-z0-9]?", name), name
        namespace = link = f"{self.tag}{name}"
        address = str(self.subnet.network_address + 2 + len(self.hosts))
        folder = self.folder / f"host-{name}"
        host = Host(name=name, namespace=namespace, address=address, link=link, folder=folder)
        self.hosts.append(host)  # before it exists: close() removes whatever of it was made
        folder.mkdir(mode=0o700, parents=True)  # root's own, as a host's state folder is
        for sub in ("work", "home", "cache", "tmp", "logs"):
            (folder / sub).mkdir()
        _ip("netns", "add", namespace)
        _ip("link", "add", link, "type", "veth", "peer", "name", "eth0", "netns", namespace)
        _ip("link", "set", link, "master", self.bridge)
        _ip("link", "set", link, "up")
        _ip("-n", namespace, "addr", "add", f"{address}/{self.subnet.prefixlen}", "dev", "eth0")
        _ip("-n", namespace, "link", "set", "eth0", "up")
        _ip("-n", namespace, "link", "set", "lo", "up")
        if cpus is not None:
            host.cgroup = _cpu_share(namespace, cpus)
        return host

    def close(self) -> None:
        """Every process of every host stopped, then the namespaces, links and bridge removed."""
        errors = []
        for host in self.hosts:
            try:
                host.stop_all()
            except Exception as exc:  # noqa: BLE001 - remove the rest anyway, then say what failed
                errors.append(f"host {host.name}: {exc}")
        for host in self.hosts:
            _ip("link", "del", host.link, check=False)
            _ip("netns", "del", host.namespace, check=False)
            if host.cgroup is not None:
                _remove_cgroup(host.cgroup)
        _ip("link", "del", self.bridge, check=False)
        left = leftovers(os.getpid())
        if errors or left:
            raise AssertionError(f"test network not removed cleanly: {errors} {left}")


def _cpu_share(name: str, cpus: float) -> Path:
    """A cgroup ``name`` of the cpu hierarchy whose processes get ``cpus`` CPUs at most (v1 only)."""
    if not (CPU_CGROUPS / "cpu.cfs_quota_us").is_file():
        raise RuntimeError(f"a host's CPU share needs cgroup v1's cpu hierarchy at {CPU_CGROUPS}")
    folder = CPU_CGROUPS / name
    folder.mkdir()
    (folder / "cpu.cfs_period_us").write_text(str(CFS_PERIOD_US))
    (folder / "cpu.cfs_quota_us").write_text(str(max(1000, round(cpus * CFS_PERIOD_US))))
    return folder


def _remove_cgroup(folder: Path) -> None:
    """Remove an emptied cgroup (a process still in it is killed first)."""
    if not folder.is_dir():
        return
    pids = {int(pid) for pid in (folder / "cgroup.procs").read_text().split()}
    _kill(pids)
    wait_gone(pids, timeout_s=15)
    folder.rmdir()


def _cgroups() -> list[Path]:
    return [path for path in CPU_CGROUPS.glob(f"{PREFIX}*") if path.is_dir()] if CPU_CGROUPS.is_dir() else []


def _namespaces() -> list[str]:
    return [line.split()[0] for line in _ip("netns", "list").splitlines() if line.strip()]


def _links() -> list[str]:
    return re.findall(r"^\d+: ([^:@\s]+)", _ip("-o", "link", "show"), re.MULTILINE)


def _owner(name: str) -> int | None:
    """The pid of the test process that made a namespace or link of this name (None: not ours)."""
    match = _OURS.match(name)
    return int(match.group(1)) if match else None


def leftovers(pid: int) -> list[str]:
    """The namespaces, links and cgroups of test process ``pid`` that still exist."""
    return [name for name in _namespaces() + _links() + [path.name for path in _cgroups()] if _owner(name) == pid]


def sweep_stale() -> None:
    """Remove the namespaces, links and cgroups (and the processes in them) that test processes no
    longer running left behind."""
    for namespace in _namespaces():
        owner = _owner(namespace)
        if owner is not None and not alive({owner}):
            pids = {int(pid) for pid in _ip("netns", "pids", namespace, check=False).split()}
            _kill(pids)
            _ip("netns", "del", namespace, check=False)
    for link in _links():
        owner = _owner(link)
        if owner is not None and not alive({owner}):
            _ip("link", "del", link, check=False)
    for cgroup in _cgroups():
        owner = _owner(cgroup.name)
        if owner is not None and not alive({owner}):
            _remove_cgroup(cgroup)


def _free_subnet() -> ipaddress.IPv4Network:
    """A /24 of ``NETWORKS`` no address of this machine is in, chosen from this process's pid."""
    used = [ipaddress.IPv4Interface(address).network for address in
            re.findall(r"inet (\S+)", _ip("-4", "-o", "addr", "show"))]
    subnets = list(NETWORKS.subnets(new_prefix=24))
    start = os.getpid() % len(subnets)
    for subnet in subnets[start:] + subnets[:start]:
        if not any(subnet.overlaps(network) for network in used):
            return subnet
    raise RuntimeError(f"no free /24 in {NETWORKS}")


@contextmanager
def host_network(folder: Path, hosts: Sequence[str] = (), cpus: float | None = None) -> Iterator[HostNetwork]:
    """A test network with ``hosts`` (more with ``add_host``), each with ``cpus`` CPUs if given,
    removed whole at the end."""
    sweep_stale()
    network = HostNetwork(folder)
    try:
        network.open()
        for name in hosts:
            network.add_host(name, cpus)
        yield network
    finally:
        network.close()


# --- a service across hosts ------------------------------------------------------------------------


@dataclasses.dataclass
class HostsService:
    """A service whose servers' host is the root namespace (private PostgreSQL and Redis listening on
    the test network, ``gradci api``, and a git daemon serving the repository it checks) and whose
    workers run on the network's hosts, one ``gradci worker --device cpu --concurrency 1`` each,
    every host with its own workdir (mirrors, checkouts, runner caches), HOME and caches."""
    network: HostNetwork
    api: Service
    repo_url: str
    sha: str
    settings: dict[str, str]
    workers: dict[str, subprocess.Popen[bytes]] = dataclasses.field(default_factory=dict)

    @property
    def database_url(self) -> str:
        return self.api.database_url

    def host(self, name: str) -> Host:
        return next(host for host in self.network.hosts if host.name == name)

    def submit(self, **fields: Any) -> int:
        return self.api.submit(repo=self.repo_url, sha=self.sha, **fields)

    def worker_name(self, host: Host) -> str:
        """The name ``gradci worker`` gives itself there (``gradci.worker.start``): device, pid, hostname."""
        return f"cpu-{self.workers[host.name].pid}@{host.hostname}"

    def start_worker(self, host: Host, clock: Path | None = None) -> subprocess.Popen[bytes]:
        """``host``'s worker (a running one stopped first), started through the production entry
        point; returned once it has beaten into the database."""
        if host.name in self.workers:
            host.stop(self.workers.pop(host.name))
        env = host.environment(service_env(database_url=self.api.database_url, broker_url=self.api.broker_url,
                                           workdir=str(host.workdir), api_token=TOKEN, **self.settings), clock)
        self.workers[host.name] = host.spawn([*GRADCI, "worker", "--device", "cpu", "--concurrency", "1"], env,
                                             WORKER_LOG)
        name = self.worker_name(host)
        wait_for(lambda: self.workers[host.name].poll() is not None or has_beaten(self.database_url, name),
                 f"the worker of host {host.name} to beat", timeout_s=90)
        assert self.workers[host.name].poll() is None, host.log(WORKER_LOG)[-4000:]
        return self.workers[host.name]

    def logs(self) -> str:
        """The tail of every log, for a failing test."""
        parts = [(f"host {host.name}", host.log(WORKER_LOG)) for host in self.network.hosts]
        parts.append(("api", self.api.log("api.log")))
        return "\n".join(f"--- {name} ---\n{text[-6000:]}" for name, text in parts)


WORKER_LOG = "gradci.worker.log"


def has_beaten(database_url: str, worker: str) -> bool:
    """Whether the worker named ``worker`` has a row in the registry (whatever its clock said)."""
    with session_scope(database_url, readonly=True) as session:
        return session.get(Worker, worker) is not None


def host_of(job: Job) -> str | None:
    """The hostname of the worker that holds or last held ``job``."""
    return job.worker.rsplit("@", 1)[-1] if job.worker else None


@contextmanager
def hosts_service(project: str, hosts: Sequence[str], *, make_repository: Callable[[Path], str] | None = None,
                  cpus: float | None = None, logs_on_exit: bool = True, **settings: str) -> Iterator[HostsService]:
    """A ``HostsService`` checking ``tests/data/projects/<project>`` with a worker on each of
    ``hosts``, ``GRADCI_<KEY>`` set from ``settings`` on the API and every worker; ready once the
    API sees every worker. All of it stopped and removed at the end, its folder too.

    ``make_repository(root)``, if given, makes the repository instead (a git repository at ``root``,
    served as ``<project>``; it returns the commit to check); ``cpus``, each host's CPU share;
    ``logs_on_exit`` prints every log's tail at the end, for pytest to show when a test failed."""
    # Not under pytest's tmp_path, private to root: the postgres user must reach its data folder.
    folder = Path(tempfile.mkdtemp(prefix="gradci-hosts-"))
    folder.chmod(0o755)
    with contextlib.ExitStack() as stack:
        stack.callback(shutil.rmtree, folder, ignore_errors=True)
        network = stack.enter_context(host_network(folder / "network", hosts, cpus))
        postgres = PrivatePostgres(folder / "postgres", host=network.gateway, clients=str(network.subnet))
        broker = PrivateRedis(folder / "redis", host=network.gateway)
        for sub in ("postgres", "redis", "repos", "api-work", "api-logs"):
            (folder / sub).mkdir()
        stack.callback(broker.kill)
        stack.callback(postgres.stop)
        stack.callback(dispose_engine, postgres.url)
        postgres.create()
        broker.start()
        root = folder / "repos" / project
        sha = make_repository(root) if make_repository is not None else project_repository(project, root)
        repo_url = stack.enter_context(git_daemon(folder / "repos", project, network.gateway, folder / "api-logs"))
        env = service_env(database_url=postgres.url, broker_url=broker.url, workdir=str(folder / "api-work"),
                          api_token=TOKEN, **settings)
        port = free_port()
        api = Service(url=f"http://{network.gateway}:{port}", database_url=postgres.url, broker_url=broker.url,
                      repo=None, sha=sha, workdir=folder / "api-work", logs=folder / "api-logs", env=env)
        api.api = start_api(env, api.logs, port, "--host", network.gateway)
        stack.callback(stop, api.api)
        service = HostsService(network=network, api=api, repo_url=repo_url, sha=sha, settings=dict(settings))
        for host in network.hosts:  # the workers first, while their servers still answer
            stack.callback(host.stop_all)
        if logs_on_exit:
            stack.callback(lambda: print(service.logs()))  # shown by pytest when a test failed
        for host in network.hosts:
            service.start_worker(host)
        wait_for(lambda: (health(api.url) or {}).get("workers_online", {}).get("cpu", 0) == len(hosts),
                 f"the API to see {len(hosts)} cpu workers", timeout_s=90)
        yield service


@contextmanager
def git_daemon(base: Path, repository: str, address: str, logs: Path) -> Iterator[str]:
    """``git daemon`` serving the repositories under ``base`` on ``address``: the hosts clone over the
    network, as from a git server. Yields the clone URL of ``base/<repository>``."""
    port = free_port()
    process = spawn(["git", "daemon", "--reuseaddr", "--export-all", "--informative-errors", f"--base-path={base}",
                     f"--listen={address}", f"--port={port}", str(base)], dict(os.environ), logs / "git-daemon.log")
    url = f"git://{address}:{port}/{repository}"
    try:
        wait_for(lambda: subprocess.run(["git", "ls-remote", url], capture_output=True, timeout=10).returncode == 0,
                 "the git daemon", timeout_s=30)
        yield url
    finally:
        stop(process)
