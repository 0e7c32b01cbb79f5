"""Where the runner runs: a bubblewrap box built from an allow-list, one per runner start.

Scenario code from a pull request is hostile. ``SandboxPolicy.box(...)`` describes the box of one
runner and ``Box.start`` starts the runner in it with **bubblewrap** (``bwrap``, the sandbox behind
Flatpak), so that no mount, namespace or capability code of ours stands between a scenario and
the machine:

- **what it sees** is built from nothing: read-only binds of the system's libraries, the
  interpreter and the installed packages (gradci's own tree reduced to the packages the runner
  imports), the run's own checkout and nothing else of the service; private tmpfs for ``/tmp``,
  ``/var/tmp``, ``/dev/shm``, ``/run`` and the capped scratch folder; ``/proc`` of its own PID
  namespace and a minimal ``/dev``; a two-line ``/etc/passwd``. No secrets folder, no workdir, no
  other checkout, no mirror, no App key: they are simply not there.
- **its own namespaces**: PID (when the runner ends, every process it started ends with it, a
  ``setsid`` grandchild included: the kernel kills a PID namespace with its first process), network
  (no route to PostgreSQL, Redis or the API), IPC, UTS and cgroup.
- **a fresh identity per start** (a worker running as root): a uid from a pool, never given out
  while a process of it lives, in a user namespace of its own; no capabilities, ``no_new_privs``.
  No two runners share a uid, so none can signal or trace another even where it could see it.
- **limits on the whole tree of its processes**: a cgroup per start with ``pids.max`` and a memory
  limit (cgroup v2, or v1's ``pids`` and ``memory`` hierarchies); where none can be made,
  ``RLIMIT_NPROC`` on its fresh uid and an address-space limit.

Where the box cannot be built (no bubblewrap, or user namespaces refused, as in Docker's default
profile) a worker refuses repository code unless its operator said ``--unsandboxed``;
``gradci check`` on a developer's machine says so once and runs the developer's own code unboxed.
"""
from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import functools
import json
import logging
import os
import random
import resource
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from gradci._layout import code_folders

log = logging.getLogger(__name__)

RUNNER_MODULE = "gradci.worker.runner_child"
# The packages the runner imports from gradci's own tree; the rest of the tree (.env, .git, a
# workdir kept beside the code, the tests) is not in the box.
# Private, small, world-writable folders (MB): writes land in memory and vanish with the box.
PRIVATE_TMPFS = {"/tmp": 64, "/var/tmp": 64, "/dev/shm": 64, "/run": 1}
# The system's programs and libraries; on a merged-/usr system all but /usr are symbolic links.
SYSTEM_FOLDERS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
# What the dynamic loader and Python read of /etc (nothing else of it: no secrets live here, but
# neither does anything a scenario needs).
ETC_FILES = ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/localtime")
# Read-only host views a framework reads to size its thread pools (the CPUs, not the processes).
CPU_TOPOLOGY = "/sys/devices/system/cpu"
# Where the uid pool keeps one lock file per uid in use (machine-wide: several workers share it).
UID_LOCKS = Path("/run/gradci/runner-uids")
CGROUP_ROOT = Path("/sys/fs/cgroup")
CGROUP_PARENT = "gradci-runners"
DEFAULT_UID_RANGE = (2_100_000_000, 2_100_999_999)
DEFAULT_PIDS_MAX = 256


class BoxUnavailable(RuntimeError):
    """The box cannot be built here; the message says why and what to do."""


# --- what this machine offers -------------------------------------------------------------------


@functools.lru_cache(maxsize=1)
def bubblewrap() -> tuple[str | None, str]:
    """(bwrap's path, its version) when it can build a box on this machine, else (None, why not)."""
    path = shutil.which("bwrap")
    if path is None:
        return None, "bubblewrap is not installed (Debian/Ubuntu: apt-get install bubblewrap)"
    version = subprocess.run([path, "--version"], capture_output=True, text=True, check=False).stdout.strip()
    identity = [] if os.geteuid() == 0 else ["--unshare-user"]
    try:
        probe = subprocess.run([path, *identity, "--unshare-pid", "--unshare-net", "--ro-bind", "/", "/",
                                "--proc", "/proc", "--", "true"],
                               capture_output=True, text=True, check=False, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"{version or 'bubblewrap'} cannot start: {exc}"
    if probe.returncode != 0:
        return None, (f"{version or 'bubblewrap'} cannot make namespaces here ({probe.stderr.strip()}); user "
                      "namespaces are off or refused (in Docker: a seccomp/AppArmor profile that allows them)")
    return path, version


def box_status() -> dict[str, Any]:
    """What the box of a runner started now would be: the workers page shows it to operators."""
    path, detail = bubblewrap()
    if path is None:
        return {"sandbox": "none", "reason": detail}
    return {"sandbox": "bubblewrap", "version": detail,
            "namespaces": ["user", "pid", "net", "ipc", "uts", "cgroup", "mount"],
            "identity": "a fresh uid per runner" if os.geteuid() == 0 else "the worker's own uid",
            "limits": Cgroup.flavour() or ("RLIMIT_NPROC" if os.geteuid() == 0 else "none")}


# --- identity: a fresh uid per runner start ------------------------------------------------------


def _inode(path: Path) -> int | None:
    try:
        return path.stat().st_ino
    except FileNotFoundError:
        return None


@dataclasses.dataclass
class Identity:
    """A uid (and gid of the same number) held for one runner, released when it ends."""

    uid: int
    lock: int | None = None  # the held lock file's descriptor

    def release(self) -> None:
        """Give the uid back; its lock file goes (unlinked while held: a waiter finds it stale)."""
        if self.lock is not None:
            with contextlib.suppress(OSError):
                (UID_LOCKS / str(self.uid)).unlink()
            os.close(self.lock)
            self.lock = None


def live_uids() -> set[int]:
    """The real uids of every process on the machine."""
    found = set()
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                found.add(os.stat(entry.path).st_uid)
    return found


def allocate_uid(first: int, last: int, *, attempts: int = 64) -> Identity:
    """A uid of ``first..last`` that no process has and no other runner holds.

    A lock per uid, machine-wide, makes sure that workers of one machine never hand out the same one.
    """
    UID_LOCKS.mkdir(parents=True, exist_ok=True, mode=0o700)
    busy = live_uids()
    for _ in range(attempts):
        uid = random.randint(first, last)
        if uid in busy:
            continue
        handle = os.open(UID_LOCKS / str(uid), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(handle)
            continue
        stale = os.fstat(handle).st_ino != _inode(UID_LOCKS / str(uid))  # its holder unlinked it meanwhile
        if stale or uid in live_uids():  # or a runner that held it a moment ago left a process behind
            os.close(handle)
            continue
        return Identity(uid, handle)
    raise BoxUnavailable(f"no free uid in {first}-{last} after {attempts} tries")


# --- limits: a cgroup per runner start -----------------------------------------------------------


@dataclasses.dataclass
class Cgroup:
    """The cgroup(s) of one runner: one folder on cgroup v2, one per hierarchy (pids, memory) on v1."""

    folders: list[Path]

    @staticmethod
    def flavour() -> str | None:
        """"cgroup v2", "cgroup v1" or None, by what root can make here."""
        if os.geteuid() != 0:
            return None
        if (CGROUP_ROOT / "cgroup.controllers").is_file():
            return "cgroup v2"
        if (CGROUP_ROOT / "pids" / "cgroup.procs").is_file():
            return "cgroup v1"
        return None

    @classmethod
    def create(cls, name: str, *, pids_max: int, memory_bytes: int | None) -> Cgroup | None:
        """The runner's cgroup with its limits, or None where none can be made (not root, none mounted)."""
        flavour = cls.flavour()
        try:
            if flavour == "cgroup v2":
                parent = CGROUP_ROOT / CGROUP_PARENT
                parent.mkdir(exist_ok=True)
                (parent / "cgroup.subtree_control").write_text("+pids +memory")
                folder = parent / name
                folder.mkdir()
                (folder / "pids.max").write_text(str(pids_max))
                if memory_bytes:
                    (folder / "memory.max").write_text(str(memory_bytes))
                    (folder / "memory.swap.max").write_text("0")
                return cls([folder])
            if flavour == "cgroup v1":
                folders = [CGROUP_ROOT / "pids" / CGROUP_PARENT / name]
                folders[0].mkdir(parents=True)
                (folders[0] / "pids.max").write_text(str(pids_max))
                memory = CGROUP_ROOT / "memory"
                if memory_bytes and (memory / "cgroup.procs").is_file():
                    folders.append(memory / CGROUP_PARENT / name)
                    folders[1].mkdir(parents=True)
                    (folders[1] / "memory.limit_in_bytes").write_text(str(memory_bytes))
                return cls(folders)
        except OSError as exc:
            log.warning("runners get no cgroup (%s): RLIMIT_NPROC limits their processes instead", exc)
        return None

    def join(self, *pids: int) -> None:
        for folder in self.folders:
            for pid in pids:
                (folder / "cgroup.procs").write_text(str(pid))

    def pids(self) -> set[int]:
        found: set[int] = set()
        for folder in self.folders:
            with contextlib.suppress(OSError):
                found.update(int(line) for line in (folder / "cgroup.procs").read_text().split())
        return found

    def process_limit_hits(self) -> int:
        """How often a fork was refused for ``pids.max`` (``pids.events``' ``max`` count)."""
        try:
            events = (self.folders[0] / "pids.events").read_text().split()
        except OSError:
            return 0
        return int(events[events.index("max") + 1]) if "max" in events else 0

    def kill_and_remove(self) -> None:
        """Kill every process still in it (a runner that forked past its end) and remove it."""
        deadline = time.monotonic() + 5
        while (pids := self.pids()) and time.monotonic() < deadline:
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.01)
        for folder in self.folders:
            with contextlib.suppress(OSError):
                folder.rmdir()


# --- the box -------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class SandboxPolicy:
    """How runners are confined.

    ``memory_limit_mb``: the memory of a runner's whole tree of processes (None: none — on GPU workers,
    CUDA's mappings); ``scratch_mb``: its scratch tmpfs; ``pids_max``: its processes; ``uid_range``: the
    pool of fresh uids (a worker running as root); ``required``: refuse repository code when the box
    cannot be built (a worker), rather than run it unboxed (``gradci check`` on the developer's own
    code); ``unsandboxed``: the operator's explicit choice to run without the box; ``gpu``: bind the
    NVIDIA devices; ``readable``: folders every runner of this policy reads besides its checkout (the
    pytest plugin's project); ``fresh_identity``: as root, a pool uid and a cgroup per start (a worker),
    else the caller's own identity in a user namespace (``gradci check``: the developer's own files,
    whatever their modes).
    """

    memory_limit_mb: int | None = None
    scratch_mb: int | None = None
    pids_max: int = DEFAULT_PIDS_MAX
    uid_range: tuple[int, int] = DEFAULT_UID_RANGE
    required: bool = True
    unsandboxed: bool = False
    gpu: bool = False
    readable: tuple[Path, ...] = ()
    fresh_identity: bool = True

    def box(self, *, scratch: Path, checkout: str | None, cache: Path | None) -> Box:
        """The box of one runner start.

        ``scratch`` is its working folder (a tmpfs), ``checkout`` the one repository tree it reads (None:
        the built-in library), ``cache`` the compilation cache it may write (None: a throwaway one in its
        scratch).
        """
        return Box(self, scratch=scratch, checkout=checkout, cache=cache)

    def refusal(self, checkout: str | None) -> str | None:
        """Why a runner for ``checkout`` must not start here (None: it may)."""
        path, detail = bubblewrap()
        if path is not None or self.unsandboxed or checkout is None or not self.required:
            return None
        return (f"this worker cannot build the runner's box ({detail}), so it refuses to run repository "
                "code; fix that, or start the worker with --unsandboxed to accept running pull-request "
                "code with no isolation")


class Box:
    """One runner's box: what it binds, the identity and cgroup it holds while the runner lives."""

    def __init__(self, policy: SandboxPolicy, *, scratch: Path, checkout: str | None, cache: Path | None) -> None:
        self.policy = policy
        self.scratch = scratch
        self.checkout = checkout
        self.cache = cache
        self.identity: Identity | None = None
        self.cgroup: Cgroup | None = None
        self._limit_hits = 0
        self.boxed = bubblewrap()[0] is not None and not policy.unsandboxed
        refusal = policy.refusal(checkout)
        if refusal:
            raise BoxUnavailable(refusal)

    def start(self, argv: list[str], env: dict[str, str], *, idle: bool = False) -> subprocess.Popen[bytes]:
        """Start ``argv`` in the box, with pipes for its stdin, stdout and stderr.

        ``idle``: at the lowest CPU priority until ``prioritise`` (a spare runner warming up must not slow
        the jobs running beside it); only where the worker may raise it back (root), else as usual.
        """
        pipes = dict(stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        if not self.boxed:
            warn_unboxed_once(self.policy)
            self.scratch.mkdir(parents=True, exist_ok=True)
            process = subprocess.Popen(argv, env=env, cwd=self.scratch, start_new_session=True, **pipes)  # type: ignore[call-overload]
            self._limit(process.pid)
            return process
        try:
            return self._start_boxed(argv, env, pipes, idle=idle)
        except BaseException:
            self.close()
            raise

    def prioritise(self) -> None:
        """Every thread in the box back to the normal CPU priority (see ``start``'s ``idle``)."""
        for pid in self.cgroup.pids() if self.cgroup is not None else ():
            try:
                threads = [int(tid) for tid in os.listdir(f"/proc/{pid}/task")]
            except OSError:
                continue  # ended meanwhile
            for tid in threads:
                with contextlib.suppress(OSError):
                    os.setpriority(os.PRIO_PROCESS, tid, 0)

    def _start_boxed(self, argv: list[str], env: dict[str, str], pipes: dict[str, int], *,
                     idle: bool) -> subprocess.Popen[bytes]:
        if os.geteuid() == 0 and self.policy.fresh_identity:
            self.identity = allocate_uid(*self.policy.uid_range)
            self.cgroup = Cgroup.create(f"runner-{self.identity.uid}", pids_max=self.policy.pids_max,
                                        memory_bytes=(self.policy.memory_limit_mb or 0) << 20 or None)
            if self.cache is not None:
                own_tree(self.cache, self.identity.uid)
        if self.cache is not None:
            self.cache.mkdir(parents=True, exist_ok=True)
        info_read, info_write = os.pipe()
        block_read, block_write = os.pipe()
        files = self._data_files()
        command = [bubblewrap()[0] or "bwrap", *self._namespaces(), *self._view(files),
                   "--info-fd", str(info_write), "--block-fd", str(block_read), "--", *self._as_runner(argv)]
        process = subprocess.Popen(command, env=env, pass_fds=(info_write, block_read, *files.values()),  # type: ignore[call-overload]
                                   start_new_session=True, **pipes)
        for handle in (info_write, block_read, *files.values()):
            os.close(handle)
        child = None
        try:
            child = self._child_pid(info_read)
            # Nothing in the box runs until it reads block-fd: its whole tree starts inside the limits.
            self._limit(child, also=process.pid)
            if idle and self.cgroup is not None:  # its cgroup lists every thread ``prioritise`` must reach
                for pid in (process.pid, child):  # before it runs: all it starts inherits it
                    os.setpriority(os.PRIO_PROCESS, pid, IDLE_NICENESS)
            os.write(block_write, b"1")
        except BaseException:
            # bwrap reads the descriptor's end as "go" too: stop the box before closing it.
            _kill_unstarted(process, child)
            raise
        finally:
            os.close(info_read)
            os.close(block_write)
        return process

    def _namespaces(self) -> list[str]:
        # As root, bwrap sets the box up with root's rights (it binds what only root reaches, an
        # interpreter under /root) and setpriv then drops them for good (``_as_runner``); otherwise a
        # user namespace of the caller's own.
        user = [] if self.identity is not None else ["--unshare-user"]
        return [*user, "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
                "--die-with-parent", "--new-session", "--hostname", "gradci-runner"]

    def _as_runner(self, argv: list[str]) -> list[str]:
        """``argv`` as the runner's fresh uid, with no way to gain privileges.

        It runs without groups, capabilities (bounding set included) or any way to gain them back
        (``no_new_privs``: no setuid program helps).
        """
        if self.identity is None:
            return argv
        uid = str(self.identity.uid)
        return ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--no-new-privs",
                "--inh-caps=-all", "--bounding-set=-all", "--", *argv]

    def _data_files(self) -> dict[str, int]:
        """Descriptors of the small files the box gets copies of: a passwd and group of its own user."""
        uid = self.identity.uid if self.identity else os.getuid()
        gid = self.identity.uid if self.identity else os.getgid()
        contents = {"/etc/passwd": f"runner:x:{uid}:{gid}:gradci runner:{self.scratch}:/usr/sbin/nologin\n",
                    "/etc/group": f"runner:x:{gid}:\n"}
        files = {}
        for path, text in contents.items():
            read, write = os.pipe()
            os.write(write, text.encode())
            os.close(write)
            files[path] = read
        return files

    def _view(self, files: dict[str, int]) -> list[str]:
        """The filesystem, from nothing: bwrap's arguments, in mount order."""
        # /etc, /var (for /var/tmp) and the like, made searchable before bwrap makes them 0700.
        args: list[str] = [arg for folder in ("/etc", "/var", "/sys") for arg in ("--perms", "0755", "--dir", folder)]
        for folder in SYSTEM_FOLDERS:
            if os.path.islink(folder):
                args += ["--symlink", os.readlink(folder), folder]
            elif os.path.isdir(folder):
                args += ["--ro-bind", folder, folder]
        for path in ETC_FILES:
            args += ["--ro-bind-try", path, path]
        for path, handle in files.items():
            args += ["--perms", "0644", "--ro-bind-data", str(handle), path]
        args += ["--proc", "/proc", "--dev", "/dev"]
        for path, size_mb in PRIVATE_TMPFS.items():
            args += ["--perms", "1777", "--size", str(size_mb << 20), "--tmpfs", path]
        reads = [*interpreter_paths(), *self.policy.readable, *([Path(self.checkout)] if self.checkout else [])]
        binds = _outermost(Path(os.path.realpath(p)) for p in reads)
        mounted = [Path(CPU_TOPOLOGY), *binds, self.scratch, *([self.cache] if self.cache else [])]
        for parent in searchable_parents(mounted):
            args += ["--perms", "0755", "--dir", str(parent)]
        args += ["--ro-bind-try", CPU_TOPOLOGY, CPU_TOPOLOGY]
        if self.policy.gpu:
            args += gpu_binds()
        for bound in binds:
            args += ["--ro-bind", str(bound), str(bound)]
        # The scratch tmpfs is the runner's alone: only its own processes are in this box.
        scratch_mb = self.policy.scratch_mb or 4096
        args += ["--perms", "1777", "--size", str(scratch_mb << 20), "--tmpfs", str(self.scratch)]
        if self.cache is not None:
            args += ["--bind", str(self.cache), str(self.cache)]
        return [*args, "--chdir", str(self.scratch)]

    @staticmethod
    def _child_pid(info: int) -> int:
        """The box's first process, from bwrap's info descriptor (closed by bwrap once written)."""
        data = b""
        while chunk := os.read(info, 4096):
            data += chunk
        try:
            return int(json.loads(data)["child-pid"])
        except (ValueError, KeyError) as exc:
            raise BoxUnavailable(f"bubblewrap did not start the box (it said {data[:200]!r})") from exc

    def _limit(self, pid: int, *, also: int | None = None) -> None:
        """Apply the runner's limits to its first process, before it runs anything.

        The rest of its processes inherit them. ``also``: bwrap itself, which joins the cgroup beside it.
        """
        if self.cgroup is not None:
            self.cgroup.join(*([also] if also else []), pid)
        elif self.identity is not None:  # no cgroup: count the processes of its fresh uid instead
            resource.prlimit(pid, resource.RLIMIT_NPROC, (self.policy.pids_max, self.policy.pids_max))
        resource.prlimit(pid, resource.RLIMIT_CORE, (0, 0))  # a crashing scenario writes no core file
        if self.policy.memory_limit_mb:
            # Per process, besides the cgroup's bound on the tree: an allocation past it fails with
            # MemoryError (an "out of memory" cell) instead of the kernel killing the runner.
            limit = self.policy.memory_limit_mb << 20
            resource.prlimit(pid, resource.RLIMIT_AS, (limit, limit))

    def process_limit_reached(self) -> bool:
        """Whether a fork in the box was refused for its process limit since the last time asked."""
        if self.cgroup is None:
            return False
        hits = self.cgroup.process_limit_hits()
        reached, self._limit_hits = hits > self._limit_hits, hits
        return reached

    def close(self) -> None:
        """After the runner ended: kill what is left of its tree, free its cgroup and uid."""
        if self.cgroup is not None:
            self.cgroup.kill_and_remove()
            self.cgroup = None
        if self.identity is not None:
            self.identity.release()
            self.identity = None


IDLE_NICENESS = 19  # the lowest CPU priority: a box started ``idle`` runs only on cycles no one else wants


def _kill_unstarted(bwrap: subprocess.Popen[bytes], child: int | None) -> None:
    """Kill a box still held on its block descriptor: bwrap, and its first process when known.

    The first process has a session of its own (``--new-session``), so bwrap's group does not hold it.
    """
    for pid in (child, bwrap.pid):
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    bwrap.wait()
    for stream in (bwrap.stdin, bwrap.stdout, bwrap.stderr):
        if stream is not None:
            stream.close()
    if child is not None:  # not ours to wait for (bwrap's): gone once the kernel has torn it down
        _wait_gone(child)


def _wait_gone(pid: int, timeout_s: float = 2.0) -> None:
    """Wait until ``pid`` has exited (gone, or a zombie nobody reaped yet): SIGKILL takes effect later."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return
        if stat[stat.rindex(")") + 2:][:1] in ("Z", "X"):
            return
        time.sleep(0.01)


_warned: set[str] = set()


def warn_unboxed_once(policy: SandboxPolicy) -> None:
    """Say once per process that runners run without the box, and why."""
    why = "the operator said --unsandboxed" if policy.unsandboxed else bubblewrap()[1]
    if why not in _warned:
        _warned.add(why)
        log.warning("runners run WITHOUT a sandbox (%s): scenario code can read what this user reads", why)
        if not policy.required:
            print(f"gradci: checking without a sandbox ({why})", file=sys.stderr)


def own_tree(folder: Path, uid: int) -> None:
    """Make ``folder`` and what is in it ``uid``'s, so that this runner reads and extends it.

    The folder is a compilation cache written by earlier runners, each with a uid of its own.
    """
    folder.mkdir(parents=True, exist_ok=True)
    for path, dirs, names in os.walk(folder):
        for name in [*dirs, *names]:
            with contextlib.suppress(OSError):
                os.lchown(os.path.join(path, name), uid, uid)
    os.chown(folder, uid, uid)
    folder.chmod(0o700)


def searchable_parents(paths: Iterable[Path]) -> list[Path]:
    """The folders on the way to ``paths`` that bwrap would make itself, outermost first.

    bwrap would make them as 0700, root's alone, so that the runner could not reach what is mounted in
    them.
    """
    made_elsewhere = (*SYSTEM_FOLDERS, *PRIVATE_TMPFS)
    parents = {parent for path in paths for parent in path.parents if parent not in (Path("/"), Path("/sys"))}
    return sorted((folder for folder in parents if folder.as_posix() not in PRIVATE_TMPFS
                   and not any(folder.is_relative_to(other) for other in made_elsewhere if other not in PRIVATE_TMPFS)),
                  key=lambda folder: len(folder.parts))


def gpu_binds() -> list[str]:
    """The NVIDIA device files and driver views a CUDA runner needs."""
    args: list[str] = []
    for entry in sorted(Path("/dev").glob("nvidia*")):
        args += ["--dev-bind", str(entry), str(entry)]
    return [*args, "--ro-bind-try", "/sys", "/sys", "--ro-bind-try", "/proc/driver/nvidia", "/proc/driver/nvidia"]


def _outermost(paths: Iterable[Path]) -> tuple[Path, ...]:
    """The paths not inside another one of them (binding a folder brings its contents)."""
    unique = set(paths)
    return tuple(sorted(p for p in unique if not any(p != other and p.is_relative_to(other) for other in unique)))


def interpreter_paths() -> tuple[Path, ...]:
    """What running Python and importing the runner needs.

    The interpreter and its prefixes, the installed packages (never the worker's current folder), and
    gradci's own packages.
    """
    paths = {Path(os.path.realpath(sys.executable)).parent}
    for prefix in (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix):
        paths.add(Path(os.path.realpath(prefix)))
    paths.update(Path(os.path.realpath(entry)) for entry in sys.path
                 if ("site-packages" in entry or "dist-packages" in entry) and os.path.isdir(entry))
    paths.update(code_folders())  # a wheel's one folder, or a checkout's gradci/ and the layers it links to
    return tuple(sorted(paths))


def runner_command() -> list[str]:
    """The runner's command line inside the box.

    -P: its working folder (the scratch) is no import root; a folder named like one of gradci's
    packages there must never shadow the installed one.
    """
    return [sys.executable, "-P", "-m", RUNNER_MODULE]
