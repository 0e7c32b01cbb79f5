"""Git repositories of scenarios, as the service checks them out."""
from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path


def git(repo: Path, *args: str) -> str:
    """``git -C repo args...``'s stripped output, with a fixed author; CalledProcessError on failure."""
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"}
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True,
                          env=env).stdout.strip()


def commit_all(repo: Path, message: str = "scenarios") -> str:
    """Commit everything in ``repo``; the new head sha."""
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD")


def init_repository(root: Path, branch: str = "main") -> Path:
    """A new, empty git repository at ``root`` (made with its parents); ``root``."""
    root.mkdir(parents=True, exist_ok=True)
    git(root, "init", "-q", "-b", branch)
    return root


def make_repository(root: Path, files: Mapping[str, str], branch: str = "main") -> str:
    """A new git repository at ``root`` holding ``files`` (relative path -> text); its head sha."""
    init_repository(root, branch)
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return commit_all(root)


def copy_repository(source: Path, root: Path, extra_files: Mapping[str, str] | None = None,
                    branch: str = "main") -> str:
    """A new git repository at ``root`` holding a copy of the folder ``source``; its head sha.

    The copy leaves caches out and adds ``extra_files``.
    """
    shutil.copytree(source, root, dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache"))
    git(root, "init", "-q", "-b", branch)
    for name, text in (extra_files or {}).items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return commit_all(root)
