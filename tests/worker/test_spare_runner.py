"""The spare runner: started ahead of any tenant, taken by one pull request's checkout, never two.

Real boxes (root, bubblewrap), as production workers start them: the spare's folder is bound empty
at its start and the checkout's files are linked into it when a pull request takes it.
"""
from __future__ import annotations

import os
import subprocess
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from gradci._testing.processes import wait_for
from gradci.worker.runner import CellSpec, WarmRunner
from gradci.worker.sandbox import SandboxPolicy, bubblewrap

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="the production box needs root (as workers run)"),
    pytest.mark.skipif(bubblewrap()[0] is None, reason=f"no box here: {bubblewrap()[1]}"),
]

PROJECT = '''
import os
from pathlib import Path

import numpy as np

from gradci import Scenario

HERE = Path(__file__).resolve().parent


def square(x):
    return (x * x).sum()


def sees(x):
    """What the runner sees of its checkout's folder, and whether it reads its own file there."""
    raise RuntimeError(f"files={sorted(os.listdir(HERE))} own={(HERE / 'mark.txt').read_text()!r}")


def lazy(x):
    """Whether torch._dynamo, which torch imports on a first use, was there before this tenant's code ran."""
    import sys
    raise RuntimeError(f"dynamo={'torch._dynamo' in sys.modules}")


def scenarios():
    x = np.array([0.3, -0.2, 0.7])
    return [Scenario("square", "gradient", square, x, dtypes=("float64",)),
            Scenario("sees", "gradient", sees, x, dtypes=("float64",)),
            Scenario("lazy", "gradient", lazy, x, dtypes=("float64",))]
'''


def checkout(base: Path, name: str) -> Path:
    folder = base / "checkouts" / name
    (folder / "pkg").mkdir(parents=True)
    (folder / "gradci.toml").write_text('[scenarios]\nmodules = ["pkg.model"]\n')
    (folder / "pkg" / "__init__.py").write_text("")
    (folder / "pkg" / "model.py").write_text(textwrap.dedent(PROJECT))
    (folder / "pkg" / "mark.txt").write_text(name)
    return folder


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("spare")
    base.chmod(0o755)
    return {"work": base / "work", "alice": checkout(base, "alice-sha"), "mallory": checkout(base, "mallory-sha")}


@pytest.fixture
def runner(world: dict[str, Path]) -> Iterator[WarmRunner]:
    the_runner = WarmRunner(cell_timeout_s=60, workdir=world["work"], sandbox=SandboxPolicy())
    yield the_runner
    the_runner.close()
    the_runner.close_spare()


def cell(runner: WarmRunner, source: Path, scenario: str, *, trusted: bool = False) -> dict:
    repository = source.name.split("-")[0]
    runner.list_source(str(source), repository=repository, trusted=trusted, rules=True)
    return runner.run_cell(CellSpec(scenario=scenario, backend="fd", device="cpu", dtype="float64",
                                    operator="gradient", framework="numpy", mode="finite", source=str(source),
                                    repository=repository, trusted=trusted))


def spare_pid(runner: WarmRunner) -> int:
    assert runner._spare is not None and runner._spare.alive
    pid = runner._spare.pid
    assert pid is not None
    return pid


def test_a_pull_request_takes_the_spare_and_gets_what_a_fresh_runner_gives(
        runner: WarmRunner, world: dict[str, Path]) -> None:
    fresh = WarmRunner(cell_timeout_s=60, workdir=world["work"], sandbox=SandboxPolicy())
    try:
        expected = [cell(fresh, world["alice"], name) for name in ("square", "sees")]
        expected_listing = fresh.list_source(str(world["alice"]), repository="alice")
    finally:
        fresh.close()
    runner.keep_spare(["fd"])
    taken = spare_pid(runner)
    got = [cell(runner, world["alice"], name) for name in ("square", "sees")]
    assert runner.pid == taken and runner.spares_taken == 1 and runner.starts == 1
    assert [(c["status"], c["message"]) for c in got] == [(c["status"], c["message"]) for c in expected]
    # (sees reads a global holding its folder's absolute path: its fingerprint is the folder's own)
    assert got[0]["fingerprint"] == expected[0]["fingerprint"]
    assert "'mark.txt', 'model.py'] own='alice-sha'" in got[1]["message"], got[1]["message"]
    listing = runner.list_source(str(world["alice"]), repository="alice")
    assert listing.scenarios[0] == expected_listing.scenarios[0]
    # Definitions relative to the checkout, as a fresh runner gives them.
    assert [(s["file"], s["line"]) for s in listing.scenarios] == [("pkg/model.py", 29), ("pkg/model.py", 30),
                                                                         ("pkg/model.py", 31)]
    assert [(s["file"], s["line"]) for s in expected_listing.scenarios] == [("pkg/model.py", 29), ("pkg/model.py", 30),
                                                                           ("pkg/model.py", 31)]


def test_a_taken_spare_serves_no_other_checkout_and_leaves_nothing(
        runner: WarmRunner, world: dict[str, Path]) -> None:
    runner.keep_spare(["fd"])
    alices = spare_pid(runner)
    assert cell(runner, world["alice"], "square")["status"] == "pass"
    folder = runner._seen_root
    assert folder is not None and Path(folder, "pkg", "model.py").exists()
    runner.keep_spare(["fd"])  # the next one, started while the worker waits
    second = spare_pid(runner)
    seen = cell(runner, world["mallory"], "sees")["message"]
    assert "own='mallory-sha'" in seen and "alice" not in seen, seen
    assert runner.pid == second != alices and runner.spares_taken == 2
    assert not Path(f"/proc/{alices}").exists() or Path(f"/proc/{alices}/status").read_text().find("zombie") >= 0
    assert not Path(folder).exists(), "alice's links outlived her runner"
    assert (world["alice"] / "pkg" / "model.py").exists(), "the checkout's own files are untouched"


def test_a_trusted_run_starts_its_own_runner_and_the_spare_waits(runner: WarmRunner, world: dict[str, Path]) -> None:
    runner.keep_spare(["fd"])
    spare = spare_pid(runner)
    assert cell(runner, world["alice"], "square", trusted=True)["status"] == "pass"
    assert runner.pid != spare and runner.spares_taken == 0
    assert spare_pid(runner) == spare  # still there for the next pull request


def test_a_spare_warms_the_frameworks_before_any_checkout(runner: WarmRunner, world: dict[str, Path]) -> None:
    runner.keep_spare(["torch-rev", "fd"])
    assert cell(runner, world["alice"], "square")["status"] == "pass"
    assert runner.spares_taken == 1 and {"torch-rev", "fd"} <= runner._warm


def test_a_spare_imports_what_torch_imports_on_a_first_use(runner: WarmRunner, world: dict[str, Path]) -> None:
    """torch._dynamo (1.6 s, imported by torch on the first nn.Parameter a module registers) is there
    before the tenant's code runs: in a spare only, since a tenant's own runner may never need it."""
    assert "dynamo=False" in cell(runner, world["alice"], "lazy")["message"]
    runner.close()
    runner.keep_spare(["torch-rev"])
    assert "dynamo=True" in cell(runner, world["mallory"], "lazy")["message"]
    assert runner.spares_taken == 1


def niceness_of_threads(pids: set[int]) -> set[int]:
    """The nice value of every thread of ``pids`` (field 19 of /proc/PID/task/TID/stat)."""
    values = set()
    for pid in pids:
        for tid in os.listdir(f"/proc/{pid}/task"):
            stat = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
            values.add(int(stat.rsplit(")", 1)[1].split()[16]))
    return values


def test_a_waiting_spare_runs_at_the_lowest_priority_and_its_tenant_at_the_usual_one(
        runner: WarmRunner, world: dict[str, Path]) -> None:
    """Warming beside running jobs, a spare takes only the cycles they leave; taken, its tenant's cells
    get their usual share."""
    runner.keep_spare(["torch-rev", "fd"])
    spare = runner._spare
    assert spare is not None and spare._box is not None
    if spare._box.cgroup is None:
        pytest.skip("no cgroup here: without one to find its threads again, a spare is not started idle")
    wait_for(lambda: any("libtorch" in Path(f"/proc/{pid}/maps").read_text() for pid in spare._box.cgroup.pids()),
             "the spare to import torch (and start its threads)", timeout_s=120, interval_s=0.1)
    waiting = niceness_of_threads(spare._box.cgroup.pids())
    assert waiting == {19}, waiting
    assert cell(runner, world["alice"], "square")["status"] == "pass"
    assert runner.spares_taken == 1
    assert runner._box is not None and runner._box.cgroup is not None
    taken = niceness_of_threads(runner._box.cgroup.pids())
    assert taken == {0}, taken


def test_a_killed_workers_spare_folders_go_with_the_next_spare(runner: WarmRunner, world: dict[str, Path]) -> None:
    """A worker process killed (no close) leaves its spare's folder, links to a checkout inside: the next
    spare started on that machine removes it; a living process's folder stays."""
    folders = world["work"] / "runner"
    dead = subprocess.Popen(["true"])
    dead.wait()  # a pid no process has now
    orphan, living = folders / f"spare-{dead.pid}-7", folders / f"spare-{os.getppid()}-7"
    for folder in (orphan, living):
        (folder / "pkg").mkdir(parents=True, exist_ok=True)
        (folder / "pkg" / "model.py").write_text("left behind")
    runner.keep_spare(["fd"])
    assert not orphan.exists() and living.exists()
    living.joinpath("pkg", "model.py").unlink()
    living.joinpath("pkg").rmdir()
    living.rmdir()
