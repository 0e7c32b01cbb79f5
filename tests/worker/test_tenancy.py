"""One checkout's code never touches another's verdicts: a runner that imported one checkout's
scenario modules never checks another checkout's cells, and each repository's runners have a
compilation cache of their own.

The attack: repository A's scenario module, at import, replaces the engine's comparison with one
that always agrees; then repository B, whose backward is 50% wrong, is checked by the same worker.
"""
from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from gradci.worker.runner import BUILT_IN, CellSpec, WarmRunner, cache_scope
from gradci.worker.sandbox import SandboxPolicy

pytestmark = pytest.mark.slow  # runners that import torch, started several times

PROJECTS = Path(__file__).resolve().parent.parent / "data" / "projects"


@pytest.fixture
def checkouts(tmp_path: Path) -> dict[str, Path]:
    found = {}
    for name in ("tenant_attacker", "tenant_victim"):
        root = tmp_path / "checkouts" / name
        shutil.copytree(PROJECTS / name, root)
        found[name] = root
    for folder in (tmp_path, tmp_path / "checkouts"):
        folder.chmod(0o755)  # readable by the runner's user, as exported checkouts are
    return found


@pytest.fixture
def runner(tmp_path: Path, checkouts: dict[str, Path]) -> Iterator[WarmRunner]:
    the_runner = WarmRunner(cell_timeout_s=120, workdir=tmp_path / "work")
    yield the_runner
    the_runner.close()


def check_all(runner: WarmRunner, root: Path, repository: str) -> list[dict]:
    listing = runner.list_source(str(root), repository=repository)
    cells = []
    for item in listing.scenarios:
        spec = CellSpec(scenario=item["name"], backend="torch-rev", device="cpu", dtype="float64",
                        operator=item["operator"], framework="torch", mode="reverse", source=str(root),
                        repository=repository)
        cells += runner.run_cells([spec])
    return cells


def attack(runner: WarmRunner, checkouts: dict[str, Path]) -> list[dict]:
    attacker = check_all(runner, checkouts["tenant_attacker"], "https://github.com/mallory/a")
    assert [c["status"] for c in attacker] == ["pass"]
    return check_all(runner, checkouts["tenant_victim"], "https://github.com/alice/b")


def test_the_victim_fails_alone(runner: WarmRunner, checkouts: dict[str, Path]) -> None:
    cells = check_all(runner, checkouts["tenant_victim"], "https://github.com/alice/b")
    assert [c["status"] for c in cells] == ["fail"] * 4


def test_after_the_attacker_the_victim_still_fails(runner: WarmRunner, checkouts: dict[str, Path]) -> None:
    cells = attack(runner, checkouts)
    assert [c["status"] for c in cells] == ["fail"] * 4, cells
    assert runner.tenant_switches == 1


def test_the_attack_succeeds_where_runners_are_shared(runner: WarmRunner, checkouts: dict[str, Path],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """What the test above guards against, shown: with one process for both checkouts (as before),
    the attacker's patch makes the victim's wrong backward pass."""
    monkeypatch.setattr(WarmRunner, "_serve", lambda self, source, repository, trusted=False: None)
    monkeypatch.setattr(runner, "sandbox", SandboxPolicy(readable=tuple(checkouts.values())))  # both in one box
    cells = attack(runner, checkouts)
    assert [c["status"] for c in cells] == ["pass"] * 4


def test_each_repository_has_its_own_compilation_cache() -> None:
    a = cache_scope(("/w/checkouts/1", "https://github.com/mallory/a", True))
    b = cache_scope(("/w/checkouts/2", "https://github.com/alice/b", True))
    b_later = cache_scope(("/w/checkouts/3", "https://github.com/alice/b", True))
    assert len({a, b, cache_scope(BUILT_IN)}) == 3 and b == b_later  # per repository, across its commits


@pytest.mark.skipif(os.geteuid() != 0, reason="fresh runner uids need root (as production workers run)")
def test_no_runner_can_signal_another_of_the_same_or_another_repository(tmp_path: Path) -> None:
    """Each runner start is a box of its own: a PID namespace (it sees no other runner) and a fresh
    uid (it could not signal one it saw)."""
    root = tmp_path / "checkouts" / "probe"
    shutil.copytree(PROJECTS / "tenant_prober", root)

    def probed(runner: WarmRunner, repository: str) -> str:
        runner.list_source(str(root), repository=repository)
        spec = CellSpec(scenario="probe", backend="fd", device="cpu", dtype="float64", operator="gradient",
                        framework="numpy", mode="finite", source=str(root), repository=repository)
        return runner.run_cell(spec)["message"]

    runners = [WarmRunner(cell_timeout_s=60, workdir=tmp_path / f"work-{i}") for i in range(3)]
    try:
        for runner, repository in zip(runners, ("a", "a", "b")):
            runner.list_source(str(root), repository=repository)
        assert len({runner.pid for runner in runners}) == 3 and all(runner.alive for runner in runners)
        assert "signalled=[]" in probed(runners[0], "a")  # neither the same repository's runner
        assert "signalled=[]" in probed(runners[2], "b")  # nor another's
    finally:
        for runner in runners:
            runner.close()
