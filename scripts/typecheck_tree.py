"""Lay out the import name ``gradci`` for mypy as links under ``build/typecheck``.

The installed distribution maps the repository's folders onto ``gradci``'s sub-packages (setup.py's
``LAYERS``; the editable install does it with an import hook, which mypy cannot follow). mypy reads
the same mapping here: ``build/typecheck/gradci`` links to ``gradci/``'s entries and to each layer's
folder, and ``[tool.mypy] mypy_path`` points at ``build/typecheck``.
"""
from __future__ import annotations

import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TREE = ROOT / "build" / "typecheck"


def lay_out(tree: Path = TREE) -> Path:
    sys.path.insert(0, str(ROOT))
    from setup import LAYERS

    shutil.rmtree(tree, ignore_errors=True)
    top = tree / "gradci"
    top.mkdir(parents=True)
    for entry in (ROOT / LAYERS["gradci"]).iterdir():
        if entry.name != "__pycache__":
            (top / entry.name).symlink_to(entry)
    for name, folder in LAYERS.items():
        if name != "gradci":
            (tree / name.replace(".", "/")).symlink_to(ROOT / folder)
    return tree


if __name__ == "__main__":
    print(lay_out())
