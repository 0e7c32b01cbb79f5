"""The public API of ``gradci``: the names type checkers see (the ``TYPE_CHECKING`` re-exports) are
the names the lazy table loads, each resolves to the object its module defines, and the wheel ships
one top-level package, ``gradci``, typed (``py.typed``)."""
from __future__ import annotations

import ast
import importlib
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import gradci

ROOT = Path(__file__).resolve().parent.parent


def type_checking_exports() -> dict[str, str]:
    """``name -> module`` of the ``from M import X as X`` lines under ``if TYPE_CHECKING:``."""
    tree = ast.parse(Path(gradci.__file__).read_text())
    block = next(node for node in tree.body if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING")
    exports = {}
    for node in block.body:
        assert isinstance(node, ast.ImportFrom) and node.module, ast.unparse(node)
        for alias in node.names:
            assert alias.asname == alias.name, f"{ast.unparse(node)}: a re-export is written `import X as X`"
            exports[alias.name] = f"{node.module}.{alias.name}" if alias.name == "library" else node.module
    return exports


def test_the_type_checking_block_and_the_lazy_table_list_the_same_names() -> None:
    seen = type_checking_exports()
    assert {name: module for name, module in seen.items() if name != "library"} == gradci._EXPORTS
    assert seen["library"] == "gradci.scenarios.library"
    assert sorted(gradci.__all__) == sorted(seen)


@pytest.mark.parametrize("name", sorted(gradci.__all__))
def test_each_public_name_resolves_to_its_modules_object(name: str) -> None:
    value = getattr(gradci, name)
    if name == "library":
        assert value is importlib.import_module("gradci.scenarios.library")
    else:
        assert value is getattr(importlib.import_module(gradci._EXPORTS[name]), name)
    assert name in dir(gradci)


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        gradci.Nope  # noqa: B018 - the attribute access is what is tested


def test_gradci_is_typed() -> None:
    assert (Path(gradci.__file__).parent / "py.typed").is_file()


def test_the_wheel_holds_only_the_gradci_package_and_is_typed(tmp_path: Path) -> None:
    """Issue 17's one import name: nothing but ``gradci/`` (its layers inside) and the dist-info."""
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--quiet",
                    "-w", str(tmp_path), str(ROOT)], check=True, capture_output=True, timeout=120)
    (wheel,) = tmp_path.glob("gradci-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    tops = {name.split("/")[0] for name in names}
    assert tops == {"gradci", f"{wheel.name.split('-')[0]}-{wheel.name.split('-')[1]}.dist-info"}
    assert "gradci/py.typed" in names
    for layer in ("scenarios", "services", "worker", "web", "cli"):
        assert f"gradci/{layer}/__init__.py" in names
    assert "gradci/worker/runner_messages.py" in names
