"""The runner's folders as the worker makes them, before any runner starts."""
from __future__ import annotations

import os
from pathlib import Path

from gradci.worker.sandbox import Layout


def test_folders_made_for_a_runner_are_searchable_by_it_whatever_the_umask(tmp_path: Path) -> None:
    scratch = tmp_path / "work" / "runner" / "scratch-1"
    layout = Layout(uid=None, gid=None, parent=os.getpid(), namespaces=False, scratch=str(scratch),
                    memory_limit_mb=None, overlays=[], writable=[str(scratch)])
    previous = os.umask(0o077)  # a hardened service account's umask
    try:
        layout.prepare()
    finally:
        os.umask(previous)
    for parent in (tmp_path / "work", tmp_path / "work" / "runner"):
        assert parent.stat().st_mode & 0o005 == 0o005, oct(parent.stat().st_mode)
    assert scratch.stat().st_mode & 0o777 == 0o700  # the scratch folder itself is the runner's alone
