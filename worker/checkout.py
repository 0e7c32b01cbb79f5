"""Repositories at exact commits: a bare mirror per repository, a read-only tree per commit.

``repo`` is a local path or a git URL (file://, https://, ssh). Each worker keeps one mirror per
repository under ``<workdir>/mirrors`` and fetches only when a commit is not there yet; a commit's
files are exported once (``git archive``) into ``<workdir>/checkouts/<sha>`` and shared by every
job that checks that commit. Exports are written to a temporary folder and renamed into place, so
a worker killed halfway never leaves a half-written tree behind; a file lock per mirror keeps two
worker processes from fetching into it at once.
"""
from __future__ import annotations

import base64
import contextlib
import fcntl
import hashlib
import io
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from urllib.parse import urlparse

GIT_TIMEOUT_S = 600
FULL_SHA = re.compile(r"^[0-9a-f]{40}([0-9a-f]{24})?$")
# Never wait for a password on a terminal nobody watches.
GIT_ENV = {"GIT_TERMINAL_PROMPT": "0", "GIT_ASKPASS": "true", "SSH_ASKPASS": "true", "LC_ALL": "C"}


class CheckoutError(RuntimeError):
    """The repository or the commit cannot be had; the message says which and why."""


def config_environment(extra_config: list[str]) -> dict[str, str]:
    """``key=value`` settings as git's GIT_CONFIG_* variables.

    Unlike ``-c`` on the command line, which every local user can read in /proc/<pid>/cmdline, they stay
    in git's own environment.
    """
    env = {"GIT_CONFIG_COUNT": str(len(extra_config))}
    for index, item in enumerate(extra_config):
        key, _, value = item.partition("=")
        env[f"GIT_CONFIG_KEY_{index}"], env[f"GIT_CONFIG_VALUE_{index}"] = key, value
    return env


def _git(args: list[str], *, cwd: Path | None = None, extra_config: Sequence[str] = (),
         stdout_bytes: bool = False) -> str | bytes:
    try:
        done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, timeout=GIT_TIMEOUT_S,
                              env={**os.environ, **GIT_ENV, **config_environment(list(extra_config))}, check=False)
    except subprocess.TimeoutExpired:
        raise CheckoutError(f"git {args[0]} timed out after {GIT_TIMEOUT_S} s") from None
    if done.returncode != 0:
        message = done.stderr.decode(errors="replace").strip().splitlines()
        raise CheckoutError(f"git {args[0]} failed: {message[-1] if message else f'exit code {done.returncode}'}")
    return done.stdout if stdout_bytes else done.stdout.decode().strip()


def normalize_repo(repo: str) -> str:
    """A local path as an absolute path; URLs as given."""
    if "://" in repo or re.match(r"^[\w.-]+@[\w.-]+:", repo):
        return repo
    return str(Path(repo).expanduser().resolve())


def auth_config(url: str, github_token: str | None, github_host: str = "github.com") -> list[str]:
    """An HTTP header carrying the GitHub token for github URLs.

    Credentials never enter the stored URL, the mirror's config or a log line.
    """
    if not github_token or urlparse(url).hostname != github_host:
        return []
    basic = base64.b64encode(f"x-access-token:{github_token}".encode()).decode()
    return [f"http.extraHeader=Authorization: Basic {basic}"]


class Checkouts:
    """Mirrors and exported commits under ``workdir``."""

    def __init__(self, workdir: Path, *, github_token: str | None = None) -> None:
        self.workdir = Path(workdir)
        self.github_token = github_token

    def mirror_dir(self, url: str) -> Path:
        digest = hashlib.sha256(url.encode()).hexdigest()[:16]
        tail = re.sub(r"[^A-Za-z0-9_.-]", "_", url.rstrip("/").rsplit("/", 1)[-1])[:40]
        return self.workdir / "mirrors" / f"{tail}-{digest}.git"

    @property
    def root(self) -> Path:
        """Where commits are exported: the one folder of the workdir a runner can read."""
        return self.workdir / "checkouts"

    def checkout_dir(self, sha: str) -> Path:
        return self.root / sha

    @contextlib.contextmanager
    def _locked(self, mirror: Path) -> Iterator[None]:
        mirror.parent.mkdir(parents=True, exist_ok=True)
        with open(f"{mirror}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            yield

    def _ensure_mirror(self, url: str, mirror: Path) -> None:
        if not mirror.exists():
            partial = mirror.with_name(mirror.name + ".partial")
            shutil.rmtree(partial, ignore_errors=True)
            _git(["clone", "--mirror", "--quiet", url, str(partial)], extra_config=auth_config(url, self.github_token))
            partial.rename(mirror)

    def _fetch(self, url: str, mirror: Path) -> None:
        _git(["fetch", "--quiet", "--prune", "origin"], cwd=mirror, extra_config=auth_config(url, self.github_token))

    def _resolve(self, mirror: Path, revision: str) -> str | None:
        try:
            return str(_git(["rev-parse", "--verify", "--quiet", f"{revision}^{{commit}}"], cwd=mirror))
        except CheckoutError:
            return None

    def resolve(self, repo: str, revision: str | None = None) -> str:
        """The full sha of ``revision``, fetching when the mirror does not know it yet.

        ``revision`` is a sha, a prefix, a branch or tag; None means the default branch's head.
        """
        url = normalize_repo(repo)
        mirror = self.mirror_dir(url)
        wanted = revision or "HEAD"
        with self._locked(mirror):
            self._ensure_mirror(url, mirror)
            # A full sha already present needs no network; a branch name always gets a fetch.
            sha = self._resolve(mirror, wanted) if FULL_SHA.match(wanted.lower()) else None
            if sha is None:
                self._fetch(url, mirror)
                sha = self._resolve(mirror, wanted)
        if sha is None:
            raise CheckoutError(f"commit {wanted!r} does not exist in {repo}")
        return sha

    def checkout(self, repo: str, revision: str | None = None) -> tuple[str, Path]:
        """(full sha, folder holding the files of that commit)."""
        sha = self.resolve(repo, revision)
        target = self.checkout_dir(sha)
        if target.exists():
            return sha, target
        archive = _git(["archive", "--format=tar", sha], cwd=self.mirror_dir(normalize_repo(repo)), stdout_bytes=True)
        target.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{sha[:12]}-", dir=target.parent))
        assert isinstance(archive, bytes)  # stdout_bytes
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(staging, filter="data")  # refuses absolute paths and links out of the tree
        staging.chmod(0o755)  # mkdtemp made it private; the runner reads it as another user
        try:
            staging.rename(target)
        except OSError:  # another process exported the same commit first: theirs is as good
            shutil.rmtree(staging, ignore_errors=True)
        return sha, target
