"""When the runner dies on a cell, only that cell is an error: the scenario's other cells are
checked again, each alone, in fresh runners. The crashed cell's message names its backend,
operator and dtype, and the innermost frames of the user's code from the faulthandler traceback."""
from __future__ import annotations

import sysconfig
from collections.abc import Iterator
from pathlib import Path

import pytest

from gradci.worker.runner import CellSpec, WarmRunner, crash_frames
from tests.support.checkouts import scenario_checkout

pytestmark = pytest.mark.slow  # runners that import torch and crash, restarted several times

MODULE = '''
import ctypes

import numpy as np
import torch

from gradci import Scenario


def crash_in_float32(x):
    if x.dtype == torch.float32:
        ctypes.string_at(0)  # a kernel that only breaks in single precision
    return torch.sum(torch.sin(x))


def scenarios():
    return [Scenario("float32-crash", "gradient", {"torch": crash_in_float32}, np.array([0.2, 0.4]))]
'''


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return scenario_checkout(tmp_path_factory.mktemp("crashing"), "crashing", MODULE)


@pytest.fixture
def runner(project: Path, tmp_path: Path) -> Iterator[WarmRunner]:
    the_runner = WarmRunner(cell_timeout_s=120, workdir=tmp_path / "work")
    yield the_runner
    the_runner.close()


def test_only_the_crashing_cells_are_errors_and_say_where(runner: WarmRunner, project: Path) -> None:
    runner.list_source(str(project))
    specs = [CellSpec(scenario="float32-crash", backend=backend, device="cpu", dtype=dtype, operator="gradient",
                      framework="torch", mode=mode, source=str(project))
             for backend, mode in (("torch-rev", "reverse"), ("torch-fwd", "forward")) for dtype in ("float64", "float32")]
    cells = {(c["backend"], c["dtype"]): c for c in runner.run_cells(specs)}
    for backend in ("torch-rev", "torch-fwd"):
        assert cells[backend, "float64"]["status"] == "pass", cells[backend, "float64"]
        crashed = cells[backend, "float32"]
        assert crashed["status"] == "error"
        assert f"killed by SIGSEGV while checking {backend} gradient float32 on cpu" in crashed["message"], crashed
        assert "user frames (faulthandler): crashing.py:12 in crash_in_float32" in crashed["message"], crashed
        assert "runner_child" not in crashed["message"]  # gradci's own frames are not the user's


def test_frames_are_read_from_faulthandlers_traceback() -> None:
    stdlib = sysconfig.get_paths()["stdlib"]
    packages = sysconfig.get_paths()["purelib"]
    output = f'''Fatal Python error: Segmentation fault

Current thread 0x00007f (most recent call first):
  File "{stdlib}/ctypes/__init__.py", line 519 in string_at
  File "/work/checkouts/abc/pkg/kernels.py", line 40 in launch
  File "/work/checkouts/abc/pkg/model.py", line 12 in forward
  File "{packages}/torch/nn/modules/module.py", line 1553 in _call_impl
'''
    assert crash_frames(output, "/work/checkouts/abc") == "pkg/kernels.py:40 in launch; pkg/model.py:12 in forward"
    assert crash_frames("nothing useful") == ""


WRITER = '''
import os

import numpy as np

from gradci import Scenario


def fills_the_disk(x):
    with open("ballast.bin", "wb") as out:  # the runner's working folder: its scratch
        for _ in range(64):
            out.write(b"\\\\0" * (1 << 20))
    return np.sum(x ** 2)


def scenarios():
    return [Scenario("fills-the-disk", "gradient", fills_the_disk, np.array([1.0]), dtypes=("float64",))]
'''


def test_a_scenario_that_writes_past_the_scratch_cap_is_an_error_and_the_disk_is_untouched(tmp_path: Path) -> None:
    from gradci.worker.sandbox import SandboxPolicy

    root = scenario_checkout(tmp_path / "writer", "writer", WRITER)
    tmp_path.chmod(0o755)
    work = tmp_path / "work"
    runner = WarmRunner(cell_timeout_s=120, workdir=work, sandbox=SandboxPolicy(scratch_mb=8))
    try:
        runner.list_source(str(root))
        cell = runner.run_cell(CellSpec(scenario="fills-the-disk", backend="fd", device="cpu", dtype="float64",
                                        operator="gradient", framework="numpy", mode="finite", source=str(root)))
    finally:
        runner.close()
    assert cell["status"] == "error", cell
    assert "No space left on device" in cell["message"] or "File too large" in cell["message"], cell["message"]
    written = sum(f.stat().st_size for f in work.rglob("*") if f.is_file())
    assert written < 8 << 20, written  # nothing of the 64 MB reached the machine's disk
