"""One definition of the layout: gradci/ links to each layer's folder, and everything follows the links.

The layers keep their folders at the top of the repository; ``gradci/scenarios`` (and the others) are
links to them, so the build, the editable install, mypy and pyright all see ``gradci.scenarios`` where
it is, and no tool needs a mapping of its own.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gradci._layout import code_folders

ROOT = Path(__file__).resolve().parent.parent
LAYERS = ("scenarios", "services", "worker", "web")
NOT_LAYERS = {"gradci", "tests", "bench", "scripts"}  # the package itself, and what the wheel leaves out


def test_every_top_level_package_is_a_layer_gradci_links_to() -> None:
    top_level = {path.parent.name for path in ROOT.glob("*/__init__.py")} - NOT_LAYERS
    links = {path.name for path in (ROOT / "gradci").iterdir() if path.is_symlink()}
    assert top_level == links == set(LAYERS)
    for layer in LAYERS:
        assert (ROOT / "gradci" / layer).resolve() == ROOT / layer


def test_gradcis_code_folders_are_the_package_and_its_layers() -> None:
    """What the runner's box binds and what is not the user's code: the same folders, read from the links."""
    assert set(code_folders()) == {ROOT / "gradci", *(ROOT / layer for layer in LAYERS)}


@pytest.mark.parametrize("layer", LAYERS)
def test_a_layer_imported_by_its_folders_name_says_its_real_name(layer: str) -> None:
    """From the repository's root ``import services`` would load a second copy of gradci.services."""
    imported = subprocess.run([sys.executable, "-c", f"import {layer}"], cwd=ROOT, capture_output=True, text=True,
                              timeout=60)
    assert imported.returncode != 0
    assert f"ImportError: {layer} is gradci.{layer}: import gradci.{layer}" in imported.stderr
