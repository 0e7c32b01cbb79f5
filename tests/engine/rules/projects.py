"""The test projects of rule coverage and detection power, imported as a user's checkout is."""
from __future__ import annotations

import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from gradci.scenarios.authoring.project import load_project, load_scenarios


def imported_copy(project: Path, package: str, tmp_path: Path) -> Iterator[tuple[Path, dict[str, Any]]]:
    """The project, copied, its modules imported from the copy and forgotten afterwards.

    Yields the copy's root and its scenarios by name; ``package`` is the project's top-level package.
    """
    root = tmp_path / "project"
    shutil.copytree(project, root)
    scenarios = {s.name: s for s in load_scenarios(load_project(root))}
    yield root, scenarios
    for name in [name for name in sys.modules if name == package or name.startswith(package + ".")]:
        del sys.modules[name]
