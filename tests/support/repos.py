"""Git repositories of scenarios for tests: the projects under ``tests/data/projects/`` copied into a
new repository, or a repository written from strings a test plants deliberately."""
from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from gradci.testing.repos import commit_all, copy_repository, git, init_repository, make_repository

PROJECTS = Path(__file__).resolve().parent.parent / "data" / "projects"

__all__ = ["PROJECTS", "commit_all", "copy_repository", "git", "init_repository", "make_repository",
           "project_repository"]


def project_repository(name: str, root: Path, extra_files: Mapping[str, str] | None = None,
                       branch: str = "main") -> str:
    """``tests/data/projects/<name>`` as a new git repository at ``root`` (plus ``extra_files``); its sha."""
    source = PROJECTS / name
    if not source.is_dir():
        raise FileNotFoundError(f"no project {name!r} in {PROJECTS}")
    return copy_repository(source, root, extra_files, branch)
