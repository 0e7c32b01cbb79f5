"""Checkouts written from strings, as a runner meets them: a folder with a ``gradci.toml`` and one
scenario module. Scenario code in them may import ``gradci`` (``gradci._testing.planted`` included),
never ``tests``."""
from __future__ import annotations

import json
import textwrap
from collections.abc import Sequence
from pathlib import Path


def gradci_toml(module: str, backends: Sequence[str] | None = None, dtypes: Sequence[str] | None = None) -> str:
    """A ``gradci.toml`` whose [scenarios] is ``module``, with a [matrix] of ``backends`` and
    ``dtypes`` where given; a test appends any other table."""
    lines = ["[scenarios]", f"modules = {json.dumps([module])}"]
    matrix = {key: list(values) for key, values in (("backends", backends), ("dtypes", dtypes)) if values is not None}
    if matrix:
        lines += ["[matrix]", *(f"{key} = {json.dumps(values)}" for key, values in matrix.items())]
    return "\n".join(lines) + "\n"


def scenario_checkout(root: Path, module: str, source: str, toml: str | None = None) -> Path:
    """``root`` (made if missing) holding ``<module>.py`` of ``source`` (dedented) and ``toml``
    (``gradci_toml(module)`` by default), readable by the runner's user as an exported checkout is."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "gradci.toml").write_text(toml if toml is not None else gradci_toml(module))
    (root / f"{module}.py").write_text(textwrap.dedent(source))
    root.chmod(0o755)
    return root
