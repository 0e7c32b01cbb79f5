"""Attacks on the runner's box, each as a scenario of a hostile repository run by the real warm
runner as production workers run it (root, bubblewrap, a fresh uid and a cgroup per start).

Every attack reports what it managed in its cell's message; each test names in its assertion what
was tried. A control beside each (the same function in this unconfined test process, or the thing
looked for being really there) shows that "found nothing" means something.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gradci.worker.runner import CellSpec, WarmRunner, cache_scope
from gradci.worker.sandbox import (
    DEFAULT_UID_RANGE,
    Box,
    BoxUnavailable,
    SandboxPolicy,
    allocate_uid,
    bubblewrap,
    live_uids,
)

pytestmark = [
    pytest.mark.slow,  # runners that start, crash and fork over and over
    pytest.mark.skipif(os.geteuid() != 0, reason="the production box needs root (as workers run)"),
    pytest.mark.skipif(bubblewrap()[0] is None, reason=f"no box here: {bubblewrap()[1]}"),
]

ATTACKS = '''
import ctypes
import os
import shutil
import subprocess
import sys
import time

import numpy as np

from gradci import Scenario

TARGETS = {targets!r}
MARKER = {marker!r}


def smooth(x):
    return float(np.sum(np.sin(x)))


def _read(path):
    try:
        with open(path, "rb") as handle:
            return handle.read(64)
    except OSError:
        return None


def read_targets():
    """Every target file this process can read, and every target folder it can list."""
    found = [path for path in TARGETS["read"] if _read(path) is not None]
    found += [path for path in TARGETS["list"] if os.path.isdir(path) and os.listdir(path)]
    return found


def reads(x):
    raise RuntimeError(f"read={{read_targets()}}")


LEFT = []


def leaves_a_grandchild(x):
    if not LEFT:  # once: the reference calls f dozens of times
        LEFT.append(True)
        if os.fork() == 0:  # a daemon: its own session, its parent gone, as setsid(1) makes it
            os.setsid()
            if os.fork() == 0:
                os.execv(sys.executable, [sys.executable, "-c", "import time; time.sleep(600)", MARKER])
            os._exit(0)
        time.sleep(0.5)
    return smooth(x)


def _runners():
    seen = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            data = _read(f"/proc/{{entry}}/cmdline") or b""
            if b"runner_child" in data:
                seen.append(int(entry))
    return seen


def reaches_runners(x):
    libc = ctypes.CDLL(None, use_errno=True)
    seen, signalled, traced = _runners(), [], []
    for pid in seen:
        try:
            os.kill(pid, 0)
            signalled.append(pid)
        except OSError:
            pass
        if libc.ptrace(16, pid, None, None) == 0:  # PTRACE_ATTACH
            traced.append(pid)
    raise RuntimeError(f"seen={{seen}} signalled={{signalled}} traced={{traced}}")


def poisons_the_cache(x):
    written = []
    for folder in [os.environ.get("GRADCI_JAX_CACHE_DIR", ""), *TARGETS["cache"]]:
        try:
            os.makedirs(folder, exist_ok=True)
            with open(os.path.join(folder, "poisoned-entry"), "w") as handle:
                handle.write("a program of the attacker's")
            written.append(folder)
        except OSError:
            pass
    raise RuntimeError(f"cache={{os.environ.get('GRADCI_JAX_CACHE_DIR')}} wrote={{written}}")


def lists_the_cache(x):
    folder = os.environ.get("GRADCI_JAX_CACHE_DIR", "")
    raise RuntimeError(f"entries={{sorted(os.listdir(folder)) if os.path.isdir(folder) else []}}")


def fork_bomb(x):
    children = 0
    while children < 5000:
        pid = os.fork()
        if pid == 0:
            time.sleep(600)
            os._exit(0)
        children += 1
    return smooth(x)


def fills_the_disk(x):
    chunk, wrote = b"x" * (1 << 20), {{}}
    for folder in TARGETS["fill"]:
        total = 0
        try:
            os.makedirs(folder, exist_ok=True)
            with open(os.path.join(folder, MARKER), "wb") as handle:
                while total < 256 << 20:
                    handle.write(chunk)
                    total += len(chunk)
        except OSError:
            pass
        wrote[folder] = total >> 20
    raise RuntimeError(f"wrote_mb={{wrote}}")


def scenarios():
    x = np.array([0.3, -0.2, 0.7])
    functions = [smooth, reads, leaves_a_grandchild, reaches_runners, poisons_the_cache, lists_the_cache,
                 fork_bomb, fills_the_disk]
    return [Scenario(f.__name__, "gradient", f, x, dtypes=("float64",)) for f in functions]
'''


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    """A worker's machine: secrets in /run/secrets and an App key, another repository's checkout and
    a mirror beside this one's, and the hostile repository's checkout."""
    base = tmp_path_factory.mktemp("box")
    base.chmod(0o755)  # as a service's folders are: what hides things must be the box, not modes
    marker = f"gradci-box-{os.getpid()}-{time.monotonic_ns()}"
    secrets = Path("/run/secrets")
    made_secrets = not secrets.exists()
    secrets.mkdir(parents=True, exist_ok=True)
    secret = secrets / f"{marker}-api-token"
    secret.write_text("s3cr3t")
    secret.chmod(0o644)  # as compose (outside swarm) used to mount them
    paths = {"base": base, "secret": secret, "app_key": base / "keys" / "app.pem",
             "other": base / "checkouts" / "other-sha", "mirror": base / "mirrors" / "alice" / "b.git",
             "work": base / "work", "checkout": base / "checkouts" / "hostile-sha"}
    paths["app_key"].parent.mkdir()
    paths["app_key"].write_text("-----BEGIN PRIVATE KEY-----")
    for folder, name in ((paths["other"], "model.py"), (paths["mirror"], "HEAD")):
        folder.mkdir(parents=True)
        (folder / name).write_text("another repository's")
    cache_host = paths["work"] / "runner" / "jax-cache" / cache_scope((str(paths["checkout"]), "hostile", True))
    targets = {"read": [str(secret), str(paths["app_key"]), str(paths["other"] / "model.py"),
                        str(paths["mirror"] / "HEAD"), str(paths["work"] / "gradci.db")],
               "list": [str(secrets), str(paths["other"]), str(paths["mirror"])],  # the workdir holds its scratch
               "cache": [str(cache_host)],
               "fill": ["/tmp", "/dev/shm", "/var/tmp", "/run/lock", str(paths["work"])]}
    paths["work"].mkdir()
    (paths["work"] / "gradci.db").write_text("the service's database")
    paths["checkout"].mkdir(parents=True)
    (paths["checkout"] / "gradci.toml").write_text('[scenarios]\nmodules = ["attacks"]\n')
    (paths["checkout"] / "attacks.py").write_text(textwrap.dedent(ATTACKS.format(targets=targets, marker=marker)))
    paths["marker"] = Path(marker)
    paths["cache_host"] = cache_host
    yield paths
    secret.unlink()
    if made_secrets:
        secrets.rmdir()
    for leftover in (Path("/tmp") / marker, Path("/dev/shm") / marker, Path("/run/lock") / marker):
        leftover.unlink(missing_ok=True)


def runner_for(world: dict[str, Path], **policy: object) -> WarmRunner:
    return WarmRunner(cell_timeout_s=60, workdir=world["work"], sandbox=SandboxPolicy(**policy))  # type: ignore[arg-type]


def check(runner: WarmRunner, world: dict[str, Path], scenario: str, *, trusted: bool = False) -> dict:
    source = str(world["checkout"])
    runner.list_source(source, repository="hostile", trusted=trusted)
    return runner.run_cell(CellSpec(scenario=scenario, backend="fd", device="cpu", dtype="float64",
                                    operator="gradient", framework="numpy", mode="finite", source=source,
                                    repository="hostile", trusted=trusted))


def processes_with(marker: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if marker.encode() in Path(f"/proc/{entry}/cmdline").read_bytes():
                    found.append(int(entry))
            except OSError:
                pass
    return found


def test_control_unconfined_the_attacks_reach_every_target(world: dict[str, Path]) -> None:
    """The same code in this (root, unboxed) process reads every secret, checkout and mirror."""
    namespace: dict[str, object] = {}
    exec(compile((world["checkout"] / "attacks.py").read_text(), "attacks.py", "exec"), namespace)
    found = namespace["read_targets"]()  # type: ignore[operator]
    assert str(world["secret"]) in found and str(world["app_key"]) in found
    assert str(world["other"] / "model.py") in found and str(world["mirror"] / "HEAD") in found


def test_it_reads_no_secret_no_app_key_no_other_checkout_no_mirror_no_workdir(world: dict[str, Path]) -> None:
    runner = runner_for(world)
    try:
        cell = check(runner, world, "reads")
    finally:
        runner.close()
    assert cell["status"] == "error" and "read=[]" in cell["message"], \
        f"tried /run/secrets, the App key, another checkout, a mirror and the workdir: {cell['message']}"


def test_a_detached_grandchild_dies_with_its_runner(world: dict[str, Path]) -> None:
    runner = runner_for(world)
    try:
        cell = check(runner, world, "leaves_a_grandchild")
        assert cell["status"] == "pass", cell
        assert processes_with(str(world["marker"])), "control: the setsid grandchild runs while its runner lives"
    finally:
        runner.close()
    deadline = time.monotonic() + 5
    while processes_with(str(world["marker"])) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not processes_with(str(world["marker"])), "a setsid grandchild outlived its runner"


@pytest.mark.parametrize("neighbour_repository", ["hostile", "another"])
def test_it_can_neither_see_signal_nor_trace_a_neighbouring_runner(world: dict[str, Path],
                                                                   neighbour_repository: str) -> None:
    attacker, neighbour = runner_for(world), runner_for(world)
    try:
        neighbour.list_source(str(world["checkout"]), repository=neighbour_repository)
        assert neighbour.alive and neighbour.pid in _host_pids()  # control: it runs beside the attacker
        cell = check(attacker, world, "reaches_runners")
    finally:
        attacker.close()
        neighbour.close()
    assert "seen=[] signalled=[] traced=[]" in cell["message"], \
        f"tried to see, signal (kill 0) and ptrace-attach a runner of {neighbour_repository}: {cell['message']}"


def _host_pids() -> set[int]:
    return {int(entry) for entry in os.listdir("/proc") if entry.isdigit()}


def test_a_pull_requests_cache_entries_never_reach_the_default_branchs_runs(world: dict[str, Path]) -> None:
    runner = runner_for(world)
    try:
        poisoned = check(runner, world, "poisons_the_cache", trusted=False)
        main = check(runner, world, "lists_the_cache", trusted=True)
    finally:
        runner.close()
    assert "wrote=[" in poisoned["message"] and str(world["cache_host"]) + "'" not in poisoned["message"].split(
        "wrote=")[1], f"a PR run wrote the repository's cache on the host: {poisoned['message']}"
    assert "poisoned-entry" not in main["message"], f"main's run loaded a PR's cache entry: {main['message']}"
    assert not (world["cache_host"] / "poisoned-entry").exists()


def test_a_fork_bomb_errors_its_cell_and_the_next_cell_passes(world: dict[str, Path]) -> None:
    runner = runner_for(world, pids_max=64)
    try:
        bomb = check(runner, world, "fork_bomb")
        after = check(runner, world, "smooth")
    finally:
        runner.close()
    assert bomb["status"] == "error" and "process limit reached" in bomb["message"], bomb["message"]
    assert after["status"] == "pass", f"after a fork bomb the next cell should pass: {after}"


def test_writes_fill_only_the_boxs_own_capped_memory_and_never_the_machine(world: dict[str, Path]) -> None:
    before = _bytes_under(world["work"])
    runner = runner_for(world)
    try:
        cell = check(runner, world, "fills_the_disk")
    finally:
        runner.close()
    assert cell["status"] == "error" and "wrote_mb=" in cell["message"], cell
    wrote = eval(cell["message"].split("wrote_mb=")[1].split("}")[0] + "}")
    assert all(megabytes <= 64 for megabytes in wrote.values()), f"filled past the box's 64 MB tmpfs: {wrote}"
    assert wrote[str(world["work"])] == 0, "wrote into the service's workdir"
    for place in ("/tmp", "/dev/shm", "/run/lock"):
        assert not (Path(place) / str(world["marker"])).exists(), f"the box's write reached the machine's {place}"
    assert _bytes_under(world["work"]) - before < 1 << 20, "the service's workdir grew"


def _bytes_under(folder: Path) -> int:
    return sum(path.stat().st_size for path in folder.rglob("*") if path.is_file())


def test_a_box_whose_limits_could_not_be_applied_never_runs(world: dict[str, Path],
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """bwrap holds the box on --block-fd until its limits are on; a closed descriptor lets it go too,
    so a failure while applying them must stop the box before the descriptor closes."""
    marker = f"{world['marker']}-unlimited"
    box = SandboxPolicy().box(scratch=world["work"] / "scratch-unlimited", checkout=str(world["checkout"]),
                              cache=None)

    def limits_fail(*args: object, **kwargs: object) -> None:
        raise OSError("the cgroup is gone")

    monkeypatch.setattr(Box, "_limit", limits_fail)
    with pytest.raises(OSError):
        box.start(["/bin/sh", "-c", f"sleep 30 # {marker}"], env={"PATH": "/usr/bin:/bin"})
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline and not processes_with(marker):
        time.sleep(0.05)  # a box let go runs its command within this
    assert not processes_with(marker), "the box ran without its limits"
    assert box.identity is None and box.cgroup is None  # its uid and cgroup were given back


def test_a_uid_is_never_handed_out_while_a_process_of_it_lives_or_another_runner_holds_it() -> None:
    uid = DEFAULT_UID_RANGE[1]
    lingering = subprocess.Popen(["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "sleep", "30"])
    try:
        deadline = time.monotonic() + 5
        while uid not in live_uids() and time.monotonic() < deadline:
            time.sleep(0.01)
        with pytest.raises(BoxUnavailable):
            allocate_uid(uid, uid, attempts=3)  # a process of it lives (a runner's leftover, say)
    finally:
        lingering.kill()
        lingering.wait()
    held = allocate_uid(uid, uid)
    try:
        with pytest.raises(BoxUnavailable):
            allocate_uid(uid, uid, attempts=3)  # another runner holds it
    finally:
        held.release()
    again = allocate_uid(uid, uid)  # released: free again, its lock file made anew
    again.release()


def test_the_whole_chain_after_every_attack_another_repositorys_wrong_backward_still_fails(
        world: dict[str, Path]) -> None:
    """One worker's runner: a hostile pull request tries every attack above (and patches the engine
    at import), then another repository's wrong backward is checked: it must fail."""
    projects = Path(__file__).resolve().parent.parent / "data" / "projects"
    hostile = world["base"] / "checkouts" / "chain-attacker"
    victim = world["base"] / "checkouts" / "chain-victim"
    if not hostile.exists():
        shutil.copytree(world["checkout"], hostile)
        shutil.copy(projects / "tenant_attacker" / "attack.py", hostile / "attack.py")
        (hostile / "gradci.toml").write_text('[scenarios]\nmodules = ["attacks", "attack"]\n')
        shutil.copytree(projects / "tenant_victim", victim)
    runner = runner_for(world, pids_max=64)
    try:
        listing = runner.list_source(str(hostile), repository="mallory/a")
        for item in listing.scenarios:
            runner.run_cell(CellSpec(scenario=item["name"], backend="fd", device="cpu", dtype="float64",
                                     operator=item["operator"], framework="numpy", mode="finite",
                                     source=str(hostile), repository="mallory/a"))
        listing = runner.list_source(str(victim), repository="alice/b")
        cells = [runner.run_cell(CellSpec(scenario=item["name"], backend="torch-rev", device="cpu", dtype="float64",
                                          operator=item["operator"], framework="torch", mode="reverse",
                                          source=str(victim), repository="alice/b"))
                 for item in listing.scenarios]
    finally:
        runner.close()
    assert cells and all(cell["status"] == "fail" for cell in cells), [(c["status"], c["message"]) for c in cells]
