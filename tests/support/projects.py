"""The scenario projects under ``tests/data/projects/``, each copied into a new git repository
(``gradci._testing.repos`` makes and commits repositories)."""
from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from gradci._testing.repos import copy_repository

PROJECTS = Path(__file__).resolve().parent.parent / "data" / "projects"

def project_repository(name: str, root: Path, extra_files: Mapping[str, str] | None = None,
                       branch: str = "main") -> str:
    """``tests/data/projects/<name>`` as a new git repository at ``root`` (plus ``extra_files``); its sha."""
    source = PROJECTS / name
    if not source.is_dir():
        raise FileNotFoundError(f"no project {name!r} in {PROJECTS}")
    return copy_repository(source, root, extra_files, branch)
