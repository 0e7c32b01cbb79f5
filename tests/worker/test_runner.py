"""The warm runner: crash containment, per-cell timeouts, restarts and the scrubbed environment,
with real subprocesses that really segfault, abort and hang."""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from gradci.worker.runner import CellSpec, WarmRunner, scrubbed_environment
from tests.support.checkouts import scenario_checkout

# A cell's time: the first after a restart imports the scenario module in a new box, which took over
# 4 s on a loaded 2-core machine; the hang test names its own short timeout.
CELL_TIMEOUT_S = 30.0

SCENARIO_MODULE = '''
import ctypes
import os
import time

import numpy as np

from gradci import Scenario
from gradci._testing.planted import segfault, smooth


def noisy(x):
    print("scenario code printing to stdout must not break the protocol")
    return smooth(x)


def null_pointer(x):
    return ctypes.string_at(0)


def abort(x):
    os.abort()


def hang(x):
    time.sleep(3600)


def environment(x):
    seen = sorted(name for name in os.environ if name != "GRADCI_JAX_CACHE_DIR"  # the runner's own cache
                  and (name.startswith("GRADCI_") or any(w in name for w in ("TOKEN", "SECRET", "PASSWORD", "KEY"))))
    raise RuntimeError(f"seen={seen} path={'PATH' in os.environ} home={'HOME' in os.environ}")


def scenarios():
    x = np.array([0.3, -0.2, 0.7])
    functions = [smooth, noisy, segfault, null_pointer, abort, hang, environment]
    return [Scenario(f.__name__, "gradient", f, x, dtypes=("float64",)) for f in functions]
'''


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return scenario_checkout(tmp_path_factory.mktemp("crashy"), "crashy_scenarios", SCENARIO_MODULE)


@pytest.fixture(scope="module")
def runner(project: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[WarmRunner]:
    with pytest.MonkeyPatch.context() as patch:
        # Credentials the worker holds: none may reach scenario code.
        patch.setenv("GRADCI_DATABASE_URL", "postgresql://gradci:hunter2@db/gradci")
        patch.setenv("GRADCI_BROKER_URL", "redis://:hunter2@redis/0")
        patch.setenv("GRADCI_API_TOKEN", "api-token")
        patch.setenv("GRADCI_GITHUB_TOKEN", "ghp_secret")
        patch.setenv("DEPLOY_TOKEN", "x")
        patch.setenv("AWS_SECRET_ACCESS_KEY", "x")
        patch.setenv("PGPASSWORD", "x")
        the_runner = WarmRunner(cell_timeout_s=CELL_TIMEOUT_S, workdir=tmp_path_factory.mktemp("runner-work"))
        the_runner.list_source(str(project))  # started for the project's checkout, whose cells follow
    yield the_runner
    the_runner.close()


def cell(runner: WarmRunner, project: Path, scenario: str, timeout_s: float | None = None) -> dict:
    spec = CellSpec(scenario=scenario, backend="fd", device="cpu", dtype="float64", operator="gradient",
                    framework="numpy", mode="finite", source=str(project))
    return runner.run_cell(spec, timeout_s=timeout_s)


def test_lists_the_checkouts_scenarios(runner: WarmRunner, project: Path) -> None:
    listing = runner.list_source(str(project))
    names = [item["name"] for item in listing["scenarios"]]
    assert names == ["smooth", "noisy", "segfault", "null_pointer", "abort", "hang", "environment"]
    assert all(len(item["fingerprint"]) == 20 for item in listing["scenarios"])
    assert "fd" in [backend["name"] for backend in listing["backends"]]


def test_a_healthy_cell_passes_and_printing_does_not_break_the_runner(runner: WarmRunner, project: Path) -> None:
    for name in ("smooth", "noisy"):
        result = cell(runner, project, name)
        assert result["status"] == "pass", result
        assert result["fingerprint"]


@pytest.mark.parametrize(("scenario", "expected"), [
    ("segfault", "killed by SIGSEGV"),
    ("null_pointer", "killed by SIGSEGV"),
    ("abort", "killed by SIGABRT"),
])
def test_a_crash_is_an_error_cell_and_the_next_cell_runs_in_a_new_runner(
    runner: WarmRunner, project: Path, scenario: str, expected: str
) -> None:
    starts, pid = runner.starts, runner.pid
    result = cell(runner, project, scenario)
    assert result["status"] == "error"
    assert expected in result["message"]
    assert (result["scenario"], result["backend"], result["device"], result["dtype"]) == (scenario, "fd", "cpu", "float64")
    after = cell(runner, project, "smooth")
    assert after["status"] == "pass"
    assert runner.starts == starts + 1 and runner.pid != pid


@pytest.mark.slow
def test_a_hang_times_out_and_the_runner_is_restarted(runner: WarmRunner, project: Path) -> None:
    starts = runner.starts
    result = cell(runner, project, "hang", timeout_s=2)
    assert result["status"] == "error"
    assert "timeout after 2 s" in result["message"]
    assert cell(runner, project, "smooth")["status"] == "pass"
    assert runner.starts == starts + 1


def test_scenario_code_sees_no_credential(runner: WarmRunner, project: Path) -> None:
    result = cell(runner, project, "environment")
    assert result["status"] == "error"
    assert "seen=[]" in result["message"], result["message"]
    assert "path=True home=True" in result["message"]


def test_scrubbed_environment_keeps_what_programs_need() -> None:
    env = scrubbed_environment({"PATH": "/bin", "HOME": "/root", "CUDA_VISIBLE_DEVICES": "1", "PYTHONPATH": "/x",
                                "GRADCI_WORKDIR": "/w", "GITHUB_TOKEN": "t", "SSH_PRIVATE_KEY": "k",
                                "DATABASE_URL": "postgres://u:p@h/d", "my_password": "p", "GRADCI_JAX_CACHE_DIR": "off"})
    assert env["PATH"] == "/bin" and env["HOME"] == "/root" and env["CUDA_VISIBLE_DEVICES"] == "1"
    assert env["GRADCI_JAX_CACHE_DIR"] == "off"  # an engine setting, not a credential
    assert env["PYTHONPATH"].endswith("/x")
    for gone in ("GRADCI_WORKDIR", "GITHUB_TOKEN", "SSH_PRIVATE_KEY", "DATABASE_URL", "my_password"):
        assert gone not in env


def test_an_unknown_scenario_is_an_error_cell(runner: WarmRunner, project: Path) -> None:
    result = cell(runner, project, "not-there")
    assert result["status"] == "error" and "not declared" in result["message"]


def test_where_no_box_can_be_built_repository_code_is_refused_unless_the_operator_says_so(
        project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from gradci.worker import sandbox
    from gradci.worker.runner import RunnerError

    monkeypatch.setattr(sandbox, "bubblewrap", lambda: (None, "bubblewrap is not installed"))
    refusing = WarmRunner(cell_timeout_s=CELL_TIMEOUT_S, workdir=tmp_path / "refusing")
    with pytest.raises(RunnerError, match=r"bubblewrap is not installed.*refuses to run repository code.*--unsandboxed"):
        refusing.list_source(str(project))
    assert not refusing.alive
    refusing.list_source(None, family="elementary")  # gradci's own library: no repository code
    refusing.close()
    unsandboxed = WarmRunner(cell_timeout_s=CELL_TIMEOUT_S, workdir=tmp_path / "unsandboxed",
                             sandbox=sandbox.SandboxPolicy(unsandboxed=True))
    try:
        assert unsandboxed.list_source(str(project)).scenarios  # the operator's explicit choice
    finally:
        unsandboxed.close()


WARMED = r"""
import sys
import torch
from gradci.worker import runner_child, runner_messages as messages
if "torch._dynamo" in sys.modules:
    print("loaded at import")
    raise SystemExit
from gradci.scenarios import check
checked = check.check_scenario
loaded_when_checked = []
def watched(scenario, *args, **kwargs):  # the warm-up's cell and the real ones: was it loaded by then?
    loaded_when_checked.append((scenario.name, "torch._dynamo" in sys.modules))
    return checked(scenario, *args, **kwargs)
check.check_scenario = watched
runner_child.warm(messages.WarmRequest(backends=["torch-func-rev", "jax-rev"]))
cache = runner_child.SourceCache()
def cells(scenario):
    request = messages.CellsRequest(scenario=scenario, backends=["torch-func-rev", "jax-rev"], devices=["cpu"],
                                    dtypes=["float64"], source=sys.argv[1])
    runner_child.handle(cache, request, beat=lambda: None)
    return "torch._dynamo" in sys.modules
print("jax only:", cells("jax-only/gradient"), "torch too:", cells("both/gradient"), loaded_when_checked[-1])
"""

WARMED_SCENARIOS = """
import numpy as np
import jax.numpy as jnp
from gradci import Scenario

def scenarios():
    x = np.array([0.5, 1.5])
    return [Scenario("jax-only/gradient", "gradient", {"jax": lambda v: jnp.sum(v ** 3)}, x, dtypes=("float64",)),
            Scenario("both/gradient", "gradient", {"jax": lambda v: jnp.sum(v ** 3), "torch": lambda v: (v ** 3).sum()},
                     x, dtypes=("float64",))]
"""


def test_a_backend_is_warmed_before_its_first_cell_and_only_where_a_scenario_reaches_it(tmp_path):
    """torch.func's first gradient imports torch._dynamo (over a second): before the cells, untraced, and
    only for a scenario that has a torch f (a jax-only repository never pays it)."""
    import subprocess
    import sys

    checkout = scenario_checkout(tmp_path / "warmed", "warmed_scenarios", WARMED_SCENARIOS)
    said = subprocess.run([sys.executable, "-c", WARMED, str(checkout)], capture_output=True, text=True,
                          check=True, cwd=tmp_path).stdout.strip()
    if said == "loaded at import":
        pytest.skip("this torch imports torch._dynamo with torch: nothing is left for a first derivative")
    assert said == "jax only: False torch too: True ('both/gradient', True)"
