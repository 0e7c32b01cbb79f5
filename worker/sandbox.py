"""Where the runner runs: as an unprivileged user, in mount, network and IPC namespaces of its own,
with an address-space limit, seeing of the service's files only what it needs.

The parent side (``SandboxPolicy.layout(...).command()``) builds the runner's command line; the sandbox side
(``python -m gradci.worker.sandbox CONFIG``, started as the worker's user inside ``unshare``) prepares the
namespaces, drops its privileges for good and then executes ``gradci.worker.runner_child``:

- every folder in ``SandboxPolicy.hidden`` (the service's workdir, its secrets folder, gradci's source
  tree, ``/tmp``...) is covered by an empty tmpfs, into which only the paths the runner needs are
  bound back (the checkouts, its own scratch folder and compilation cache, gradci's packages);
  folders the runner user could not even traverse on the way to what it needs (a Python installed
  under ``/root``) are covered the same way, so it reaches the interpreter and nothing beside it;
- the network namespace has no interface but a loopback that is down: the database, the broker and
  the API are out of reach even where they trust local connections;
- uid and gid become the runner user's (``gradci-runner``, created when missing), supplementary
  groups are dropped and ``no_new_privs`` is set, so no setuid program gives them back.

Without root (or where namespaces are refused, as in Docker's default profile) it degrades to what
is possible and says so once in the worker's log: see the README's "Security model".
"""
from __future__ import annotations

import ctypes
import dataclasses
import functools
import importlib.util
import json
import logging
import os
import pwd
import resource
import shutil
import signal
import stat
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from gradci.services.secrecy import libc

log = logging.getLogger(__name__)

DEFAULT_RUNNER_USER = "gradci-runner"
RUNNER_MODULE = "gradci.worker.runner_child"
# The packages the runner imports from gradci's own tree; the rest of the tree (.env, .git, a
# workdir kept beside the code) stays hidden.
RUNNER_PACKAGES = ("gradci", "gradci.scenarios", "gradci.services", "gradci.worker")
# In an editable install the layers are the repository's own folders (setup.py's mapping) and this
# is the tree; in a wheel it is site-packages/gradci, which has no pyproject.toml.
SOURCE_ROOT = Path(__file__).resolve().parent.parent
# World-writable places the runner gets private, small copies of (writes land in a tmpfs that
# disappears with it, never on the machine's own /tmp).
PRIVATE_TMP = {"/tmp": "64m", "/var/tmp": "64m", "/dev/shm": "64m"}

_MS_NOSUID, _MS_NODEV, _MS_REMOUNT, _MS_BIND, _MS_REC = 0x2, 0x4, 0x20, 0x1000, 0x4000
_MS_RDONLY = 0x1
_PR_SET_PDEATHSIG, _PR_SET_NO_NEW_PRIVS = 1, 38


# --- the parent side ----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class SandboxPolicy:
    """How runners are confined. ``user``: whom they run as when the worker runs as root (None:
    the worker's own user); ``memory_limit_mb``: their address-space limit (None: none — CUDA
    reserves address space far beyond the memory it uses); ``hidden``: the service's folders
    (workdir, secrets), of which a runner sees only what its layout binds back."""

    user: str | None = DEFAULT_RUNNER_USER
    memory_limit_mb: int | None = None
    hidden: tuple[Path, ...] = ()
    scratch_mb: int | None = None  # the scratch folder's size (a tmpfs in the runner's namespace)

    def layout(self, *, scratch: Path, writable: tuple[Path, ...] = (), visible: tuple[Path, ...] = ()) -> Layout:
        """The sandbox of one runner: ``scratch`` is its working folder, ``writable`` (a compilation
        cache) and ``visible`` (the checkouts) what else it reaches, read-write and read-only."""
        account = runner_account(self.user) if os.geteuid() == 0 else None
        writable = (scratch, *writable)
        reached: list[Path] = [*visible, *interpreter_paths()]
        needed = _outermost(Path(os.path.realpath(p)) for p in reached) + writable
        hidden = [Path(os.path.realpath(p)) for p in [*map(str, self.hidden), *PRIVATE_TMP]]
        if _source_tree():
            hidden.append(SOURCE_ROOT)
        if account is not None:
            hidden += untraversable_ancestors(needed, account)
        return Layout(
            uid=account.pw_uid if account else None, gid=account.pw_gid if account else None, parent=os.getpid(),
            namespaces=namespaces_available(), scratch=str(scratch), memory_limit_mb=self.memory_limit_mb,
            scratch_mb=self.scratch_mb,
            overlays=[{"path": str(path), "keep": [str(p) for p in needed if _under(p, path)],
                       "size": PRIVATE_TMP.get(str(path), "1m"),
                       "mode": "1777" if str(path) in PRIVATE_TMP else "0755"}
                      for path in sorted(set(hidden), key=lambda p: len(p.parts)) if path.is_dir()],
            writable=[str(path) for path in writable],
        )


@dataclasses.dataclass
class Layout:
    """Everything ``python -m gradci.worker.sandbox`` needs to know, as JSON on its command line."""

    uid: int | None
    gid: int | None
    parent: int  # the worker process it must die with
    namespaces: bool
    scratch: str
    memory_limit_mb: int | None
    overlays: list[dict[str, Any]]
    writable: list[str]
    scratch_mb: int | None = None  # the scratch folder's size in MB (None: uncapped)

    def command(self) -> list[str]:
        # -P: this part runs as root in the runner's folder; nothing there is imported.
        me = [sys.executable, "-P", "-m", "gradci.worker.sandbox", json.dumps(dataclasses.asdict(self))]
        if self.namespaces:
            return ["unshare", "--mount", "--net", "--ipc", "--propagation", "private", "--", *me]
        return me

    def prepare(self) -> None:
        """The runner's writable folders, its own (run by the parent, before the runner starts)."""
        for folder in map(Path, self.writable):
            # Parents made here are searchable whatever the umask: untraversable_ancestors, which ran
            # before they existed, counted on the runner user reaching its folders through them.
            for parent in [p for p in reversed(folder.parents) if not p.exists()]:
                parent.mkdir(exist_ok=True)
                parent.chmod(0o755)
            folder.mkdir(exist_ok=True)
            folder.chmod(0o700)
            if self.uid is not None:
                os.chown(folder, self.uid, self.gid if self.gid is not None else -1)  # -1: the group unchanged


def _outermost(paths: Iterable[Path]) -> tuple[Path, ...]:
    """The paths not inside another one of them (binding a folder back brings its contents)."""
    unique = set(paths)
    return tuple(sorted(p for p in unique if not any(_under(p, other) for other in unique)))


def _under(path: Path, folder: Path) -> bool:
    return path != folder and path.is_relative_to(folder)


def _source_tree() -> bool:
    """gradci runs from its source tree (an editable install, a clone on PYTHONPATH), not from
    site-packages: then only its packages are shown to the runner, not the tree around them."""
    return (SOURCE_ROOT / "pyproject.toml").is_file()


def interpreter_paths() -> tuple[Path, ...]:
    """What running Python and importing the runner needs: the interpreter and its prefixes, the
    installed packages (never the worker's current folder), and gradci's own packages."""
    paths = {Path(os.path.realpath(sys.executable)).parent}
    for prefix in (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix):
        paths.add(Path(os.path.realpath(prefix)))
    paths.update(Path(os.path.realpath(entry)) for entry in sys.path
                 if ("site-packages" in entry or "dist-packages" in entry) and os.path.isdir(entry))
    paths.update(_package_folder(name) for name in RUNNER_PACKAGES)
    return tuple(sorted(paths))


def _package_folder(name: str) -> Path:
    spec = importlib.util.find_spec(name)
    assert spec is not None and spec.submodule_search_locations, name
    return Path(os.path.realpath(next(iter(spec.submodule_search_locations))))


def untraversable_ancestors(paths: tuple[Path, ...], account: pwd.struct_passwd) -> list[Path]:
    """Folders on the way to ``paths`` that the runner user may not traverse (``/root``, a test's
    private temporary folder): they are covered too, and the paths bound back into them."""
    found = []
    for path in paths:
        for ancestor in list(reversed(path.parents))[1:]:
            if not ancestor.exists():  # made later by ``Layout.prepare``, searchable by everyone
                break
            if not _searchable(ancestor, account):
                found.append(ancestor)
                break
    return found


def _searchable(folder: Path, account: pwd.struct_passwd) -> bool:
    info = folder.stat()
    if info.st_uid == account.pw_uid:
        return bool(info.st_mode & stat.S_IXUSR)
    if info.st_gid == account.pw_gid:
        return bool(info.st_mode & stat.S_IXGRP)
    return bool(info.st_mode & stat.S_IXOTH)


def runner_account(name: str | None) -> pwd.struct_passwd | None:
    """The runner user's account, created (a system user without a home or a shell) when missing."""
    if not name:
        return None
    try:
        return pwd.getpwnam(name)
    except KeyError:
        pass
    created = subprocess.run(["useradd", "--system", "--user-group", "--no-create-home", "--home-dir", "/nonexistent",
                              "--shell", "/usr/sbin/nologin", name], capture_output=True, text=True, check=False)
    try:  # another worker process may have created it first: then useradd failed, and that is fine
        return pwd.getpwnam(name)
    except KeyError:
        raise RuntimeError(f"cannot create the runner user {name!r}: {created.stderr.strip()}") from None


@functools.lru_cache(maxsize=1)
def namespaces_available() -> bool:
    """Whether this process may make the runner's namespaces (root outside a restricted container)."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return False
    probe = subprocess.run(["unshare", "--mount", "--net", "--ipc", "--propagation", "private", "--", "true"],
                           capture_output=True, check=False)
    if probe.returncode != 0:
        log.warning("runners get no namespaces of their own (%s): see the README's Security model",
                    probe.stderr.decode(errors="replace").strip())
    return probe.returncode == 0


# --- the sandbox side (root in the new namespaces, until it execs the runner) -------------------


def _mount(source: str, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    if libc().mount(source.encode(), target.encode(), fstype.encode() if fstype else None, flags,
                     data.encode() if data else None) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"mount {source} on {target}: {os.strerror(errno)}")


def cover(overlays: list[dict[str, Any]], writable: list[str]) -> None:
    """An empty tmpfs over each folder, the kept paths bound back into it (read-only unless writable).
    The kept paths are opened before anything is covered, so nested covers still find them."""
    handles = {keep: os.open(keep, os.O_PATH | os.O_DIRECTORY)
               for overlay in overlays for keep in overlay["keep"] if os.path.isdir(keep)}
    for overlay in overlays:
        _mount("tmpfs", overlay["path"], "tmpfs", _MS_NOSUID | _MS_NODEV,
               f"mode={overlay['mode']},size={overlay['size']}")
        for keep in overlay["keep"]:
            if keep not in handles:
                continue
            os.makedirs(keep, exist_ok=True)
            _mount(f"/proc/self/fd/{handles[keep]}", keep, None, _MS_BIND | _MS_REC)
            if keep not in writable:
                _mount("none", keep, None, _MS_REMOUNT | _MS_BIND | _MS_RDONLY | _MS_NOSUID | _MS_NODEV)
    for handle in handles.values():
        os.close(handle)


def confine(layout: dict[str, Any]) -> None:
    if layout["namespaces"]:
        cover(layout["overlays"], layout["writable"])
        if layout["scratch_mb"]:  # what scenario code writes lands in memory, capped, never on the disk
            _mount("tmpfs", layout["scratch"], "tmpfs", _MS_NOSUID | _MS_NODEV,
                   f"mode=0700,size={layout['scratch_mb']}m")
            if layout["uid"] is not None:
                os.chown(layout["scratch"], layout["uid"], layout["gid"])
    if layout["scratch_mb"]:
        # No file past the cap anywhere it may write (the only bound without namespaces); a write
        # past it fails with EFBIG instead of killing the runner with SIGXFSZ.
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        cap = layout["scratch_mb"] << 20
        resource.setrlimit(resource.RLIMIT_FSIZE, (cap, cap))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # a segfaulting scenario writes no core file
    if layout["memory_limit_mb"]:
        limit = layout["memory_limit_mb"] << 20
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    if layout["uid"] is not None:
        os.setgroups([])
        os.setresgid(layout["gid"], layout["gid"], layout["gid"])
        os.setresuid(layout["uid"], layout["uid"], layout["uid"])
    libc().prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    # Die with the worker process (set after the uid change, which clears it): a runner stuck in
    # an endless loop would otherwise outlive a killed worker, in its own session.
    libc().prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != layout["parent"]:
        os._exit(1)  # the worker died before the line above
    os.chdir(layout["scratch"])


def main() -> None:
    confine(json.loads(sys.argv[1]))
    # -P: the working folder (its scratch) is not an import root; a folder named like one of our
    # packages there, or in a workdir above it, must never shadow the installed gradci.
    os.execv(sys.executable, [sys.executable, "-P", "-m", RUNNER_MODULE])


if __name__ == "__main__":
    main()
