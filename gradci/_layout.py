"""Where gradci's code lies on disk: its package folder, and the folders its layers really are.

A wheel holds one folder, ``gradci/``. A checkout keeps the layers at the top of the repository
(``scenarios/``, ``services/``, ``worker/``, ``web/``) and ``gradci/`` links to each: those links are
the one definition of the layout, and whoever needs gradci's folders (the runner's box, the filter
that tells gradci's frames from the user's) reads them here, the same way for both installs.
"""
from __future__ import annotations

import functools
from pathlib import Path

PACKAGE = Path(__file__).parent  # as imported: an editable install's is the checkout's gradci/


@functools.cache
def code_folders() -> tuple[Path, ...]:
    """gradci's folders, resolved: the package's, and each linked layer's (none in a wheel)."""
    folders = {PACKAGE.resolve()}
    folders.update(child.resolve() for child in PACKAGE.iterdir() if child.is_symlink() and child.is_dir())
    return tuple(sorted(folders))
