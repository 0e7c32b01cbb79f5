"""The scenario projects under ``tests/data/projects/``, each copied into a new git repository
(``gradci._testing.repos`` makes and commits repositories)."""
from __future__ import annotations

import shutil
import subprocess
import sys
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


def project_copy(name: str, root: Path) -> Path:
    """``tests/data/projects/<name>`` copied to ``root`` (no git): a project to run ``gradci check`` on."""
    shutil.copytree(PROJECTS / name, root)
    return root


def gradci_check(root: Path, *args: str) -> subprocess.CompletedProcess:
    """``gradci check --repo root -j 1 ARGS`` in a subprocess, as a user runs it; its output captured."""
    return subprocess.run([sys.executable, "-m", "gradci", "check", "--repo", str(root), "-j", "1", *args],
                          capture_output=True, text=True, timeout=300)
