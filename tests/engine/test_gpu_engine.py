"""The engine's GPU path on a simulated GPU (GRADCI_DEVICE_INVENTORY): simulated cuda cells compute on
the CPU through the same code, record their precision, compare with the CPU (agreement cells), run in
half precision, and repeat to check bitwise reproducibility."""
from __future__ import annotations

import dataclasses
import inspect
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import gradci
from gradci import Scenario, namespace
from gradci._testing import planted
from gradci._testing.planted import X, torch_elementwise
from gradci._testing.planted import scenario as planted_scenario
from gradci.scenarios.check import available_devices, check
from gradci.scenarios.contract.devices import current_device
from gradci.scenarios.numerics.tolerances import AGREEMENT_TOLERANCES, DEFAULT_TOLERANCES, TF32_TOLERANCE, tolerance_for
from gradci.scenarios.verdict.repeats import repeat_spread
from gradci.worker.agreement_specs import agreement_spec
from gradci.worker.runner import CellSpec

GPUS = [{"name": "NVIDIA H100", "capability": "90", "memory_total": 85899345920},
        {"name": "NVIDIA A100", "capability": "80", "memory_total": 42949672960}]


@pytest.fixture
def two_gpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "gpus.json"
    path.write_text(json.dumps(GPUS))
    monkeypatch.setenv("GRADCI_DEVICE_INVENTORY", str(path))
    return path


def by_device(report) -> dict[tuple[str, str, str], object]:
    return {(cell.backend, cell.device, cell.dtype): cell for cell in report.cells}


def torch_sin_scaled_on_cuda(scale: float):
    """sin whose backward is off by ``scale`` only while a cuda cell computes: a CUDA kernel's bug."""
    import torch

    return torch_elementwise(torch.sin, torch.cos,
                             lambda x: scale if current_device().startswith("cuda") else 1.0)


@pytest.fixture
def tf32_switches():
    """Sets torch's TF32 switches (module attributes without a plain value to monkeypatch) and puts
    them back after the test."""
    import torch

    saved = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32,
             torch.get_float32_matmul_precision())

    def switch(matmul: bool, cudnn: bool) -> None:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = matmul, cudnn

    yield switch
    torch.set_float32_matmul_precision(saved[2])
    switch(*saved[:2])


def square_sum(x):
    return namespace(x).sum(x * x)


# --- 1. simulated cuda executes on the CPU ------------------------------------------------------------

def test_available_devices_follow_the_simulated_inventory(two_gpus: Path) -> None:
    assert available_devices() == ["cpu", "cuda:0", "cuda:1"]


def test_simulated_cuda_cells_run_on_the_cpu_and_say_so(two_gpus: Path) -> None:
    s = Scenario("square", "gradient", square_sum, np.array([1.0, 2.0]), dtypes=("float32",))
    cells = by_device(check([s], backends=["torch-rev", "jax-rev"], devices=["cuda:0", "cuda:1", "cuda:2"]))
    for backend in ("torch-rev", "jax-rev"):
        for device in ("cuda:0", "cuda:1"):
            cell = cells[(backend, device, "float32")]
            assert cell.status == "pass", cell.message
            assert f"simulated {device} (ran on the cpu)" in cell.precision
        missing = cells[(backend, "cuda:2", "float32")]
        assert missing.status == "skip" and "not in the simulated inventory (2 GPUs)" in missing.message


def test_without_an_inventory_cuda_cells_skip_here(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GRADCI_DEVICE_INVENTORY", raising=False)
    s = Scenario("square", "gradient", square_sum, np.array([1.0, 2.0]), dtypes=("float32",))
    (cell,) = check([s], backends=["torch-rev"], devices=["cuda:0"]).cells
    assert cell.status == "skip" and "simulated" not in cell.precision


def test_scenario_code_sees_the_device_of_its_cell(two_gpus: Path) -> None:
    seen = []

    def f(x):
        seen.append(current_device())
        return namespace(x).sum(x * x)

    check([Scenario("seen", "gradient", f, np.array([1.0, 2.0]))], backends=["torch-rev"], devices=["cpu", "cuda:1"],
          dtypes=["float64"])
    assert {"cpu", "cuda:1"} <= set(seen)
    assert gradci.current_device() == "cpu"  # outside a cell again


# --- 2. precision recorded, pinned, with its tolerance ------------------------------------------------

def test_precision_records_the_frameworks_switches_as_they_were(tf32_switches) -> None:
    import jax

    s = Scenario("square", "gradient", square_sum, np.array([1.0, 2.0]), dtypes=("float32",))
    tf32_switches(True, False)
    cells = by_device(check([s], backends=["torch-rev", "jax-rev"], devices=["cpu"]))
    assert cells[("torch-rev", "cpu", "float32")].precision == "torch tf32 matmul=on cudnn=off fp32_matmul=high"
    assert cells[("jax-rev", "cpu", "float32")].precision == "jax matmul=default"
    with jax.default_matmul_precision("highest"):
        (cell,) = check([s], backends=["jax-rev"], devices=["cpu"]).cells
    assert cell.precision == "jax matmul=highest"


@pytest.mark.parametrize("pin, start", [("tf32", False), ("highest", True)])
def test_a_pinned_precision_applies_around_the_cell_and_is_restored(pin: str, start: bool, tf32_switches) -> None:
    import jax
    import torch

    tf32_switches(start, start)
    seen = {}

    def torch_f(x):
        seen["torch"] = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
        return (x * x).sum()

    def jax_f(x):
        seen["jax"] = jax.config.jax_default_matmul_precision
        return (x * x).sum()

    s = Scenario("pinned", "gradient", {"numpy": square_sum, "torch": torch_f, "jax": jax_f}, np.array([1.0, 2.0]),
                 dtypes=("float32",), precision=pin)
    cells = by_device(check([s], backends=["torch-rev", "jax-rev"], devices=["cpu"]))
    on = pin == "tf32"
    assert seen["torch"] == (on, on)
    assert seen["jax"] == {"tf32": "tensorfloat32", "highest": "highest"}[pin]
    switches = f"matmul={'on' if on else 'off'} cudnn={'on' if on else 'off'}"
    assert switches in cells[("torch-rev", "cpu", "float32")].precision
    assert cells[("jax-rev", "cpu", "float32")].precision == f"jax matmul={seen['jax']}"
    assert (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32) == (start, start)
    assert jax.config.jax_default_matmul_precision is None


def test_tf32_cells_get_the_tf32_tolerance(monkeypatch: pytest.MonkeyPatch) -> None:
    from gradci.scenarios.adapters.torch_adapter import TorchAdapter

    assert tolerance_for("float32", tf32=True) == TF32_TOLERANCE
    assert TF32_TOLERANCE.rtol > DEFAULT_TOLERANCES["float32"].rtol
    assert tolerance_for("float64", tf32=True) == DEFAULT_TOLERANCES["float64"]  # TF32 touches float32 only
    assert all(AGREEMENT_TOLERANCES[d].rtol < DEFAULT_TOLERANCES[d].rtol for d in DEFAULT_TOLERANCES)
    s = Scenario("square", "gradient", square_sum, np.array([1.0, 2.0]), dtypes=("float32",))
    (plain,) = check([s], backends=["torch-rev"], devices=["cpu"]).cells
    assert plain.rtol == DEFAULT_TOLERANCES["float32"].rtol
    # as a GPU with TF32 on answers (a CPU never computes in TF32: tf32_active is False here)
    monkeypatch.setattr(TorchAdapter, "tf32_active", lambda self, device, dtype: dtype == "float32")
    (tf32,) = check([s], backends=["torch-rev"], devices=["cpu"]).cells
    assert tf32.rtol == TF32_TOLERANCE.rtol


# --- 3. CPU–GPU agreement -----------------------------------------------------------------------------

@pytest.mark.parametrize("devices", [["cpu", "cuda:0"], ["cuda:0", "cuda:0-vs-cpu"]])
def test_a_cuda_only_bug_inside_the_fd_tolerance_fails_agreement(two_gpus: Path, devices: list[str]) -> None:
    s = dataclasses.replace(planted_scenario("cuda-bug", "torch", torch_sin_scaled_on_cuda(1 + 2e-4)),
                            dtypes=("float32",))
    cells = by_device(check([s], backends=["torch-rev"], devices=devices))
    assert cells[("torch-rev", "cuda:0", "float32")].status == "pass"  # 2e-4 is inside float32's 2e-3
    agreement = cells[("torch-rev", "cuda:0-vs-cpu", "float32")]
    assert agreement.status == "fail", agreement.message
    # only the cos(x)·x part of sin(x) + cos(x)·x is scaled: under 2e-4 overall, far over float32's 2e-5
    assert AGREEMENT_TOLERANCES["float32"].rtol < agreement.max_rel_err < 2e-4
    assert "GPU and CPU disagree" in agreement.message
    assert ("torch-rev", "cpu", "float32") in cells if "cpu" in devices else len(cells) == 2
    if "cpu" in devices:
        assert cells[("torch-rev", "cpu", "float32")].status == "pass"


def test_agreeing_results_pass_and_unrun_gpu_cells_skip(two_gpus: Path) -> None:
    good = dataclasses.replace(planted_scenario("good", "torch", torch_sin_scaled_on_cuda(1.0)),
                               dtypes=("float64", "float32"), skip={("*", "cuda*", "float64"): "not on the GPU"})
    cells = by_device(check([good], backends=["torch-rev"], devices=["cpu", "cuda:0"]))
    agreement = cells[("torch-rev", "cuda:0-vs-cpu", "float32")]
    assert agreement.status == "pass" and agreement.max_abs_err == 0.0
    assert agreement.rtol == AGREEMENT_TOLERANCES["float32"].rtol
    skipped = cells[("torch-rev", "cuda:0-vs-cpu", "float64")]
    assert skipped.status == "skip" and "no cuda:0 result" in skipped.message


def test_without_cpu_in_the_matrix_there_is_no_agreement_cell(two_gpus: Path) -> None:
    s = Scenario("square", "gradient", square_sum, np.array([1.0, 2.0]), dtypes=("float32",))
    report = check([s], backends=["torch-rev"], devices=["cuda:0", "cuda:1"])
    assert sorted(cell.device for cell in report.cells) == ["cuda:0", "cuda:1"]


def test_a_gpu_job_asks_the_runner_for_its_agreement_cell() -> None:
    spec = CellSpec(scenario="s", backend="torch-rev", device="cuda.sm90", dtype="float32", run_on="cuda:0")
    compared = agreement_spec(spec)
    assert (compared.device, compared.run_on) == ("cuda.sm90-vs-cpu", "cuda:0-vs-cpu")
    assert dataclasses.replace(compared, device=spec.device, run_on=spec.run_on) == spec


# --- 4. half precision on cuda ------------------------------------------------------------------------

def mlp(params, x):
    xp = namespace(params["w1"])
    hidden = xp.tanh(x @ params["w1"] + params["b1"])
    return 20 * xp.sum((hidden @ params["w2"]) ** 2) / x.shape[0]  # gradients well above atol's floor of 1


def mlp_scenario(wrong_by: float = 0.0) -> Scenario:
    rng = np.random.default_rng(0)
    params = {"w1": rng.normal(size=(3, 4)) * 0.5, "b1": rng.normal(size=4) * 0.1, "w2": rng.normal(size=(4, 2)) * 0.5}
    x = rng.normal(size=(5, 3))

    def torch_mlp(p, xs):  # wrong_by: the gradient scaled by 1 + wrong_by, the value unchanged
        out = mlp(p, xs)
        return out + wrong_by * (out - out.detach())

    return Scenario(f"mlp{'-wrong' if wrong_by else ''}", "gradient", {"numpy": mlp, "torch": torch_mlp, "jax": mlp},
                    params, contexts=(x,), dtypes=("float32", "float16", "bfloat16"))


def test_half_precision_cells_run_on_cuda_and_pass_for_a_small_mlp(two_gpus: Path) -> None:
    report = check([mlp_scenario()], backends=["torch-rev", "jax-rev"], devices=["cuda:0"])
    assert {(cell.dtype, cell.status) for cell in report.cells} == {("float32", "pass"), ("float16", "pass"),
                                                                   ("bfloat16", "pass")}, \
        [(c.backend, c.dtype, c.status, c.message) for c in report.cells]
    assert {cell.rtol for cell in report.cells if cell.dtype == "bfloat16"} == {DEFAULT_TOLERANCES["bfloat16"].rtol}


def test_half_precision_cells_fail_for_a_planted_bug(two_gpus: Path) -> None:
    report = check([mlp_scenario(wrong_by=0.3)], backends=["torch-rev"], devices=["cuda:0"],
                   dtypes=["float16", "bfloat16"])
    assert [cell.status for cell in report.cells] == ["fail", "fail"]


# --- 5. nondeterminism --------------------------------------------------------------------------------

def noisy_square():
    """x² whose backward adds noise far below any tolerance: a result that is right, not reproducible."""
    import torch

    noise = torch.Generator().manual_seed(1)
    return torch_elementwise(lambda x: x * x, lambda x: 2 * x,
                             lambda x: 1 + 1e-9 * torch.rand(x.shape, generator=noise, dtype=x.dtype))


def test_repeats_report_nondeterminism_without_failing(two_gpus: Path) -> None:
    square = noisy_square()
    noisy = Scenario("noisy", "gradient", {"numpy": lambda x: np.sum(x * x), "torch": lambda x: square(x).sum()},
                     X, dtypes=("float64",), repeats=4)
    (cell,) = check([noisy], backends=["torch-rev"], devices=["cuda:0"]).cells
    assert cell.status == "pass"
    assert 0 < cell.repeat_spread < 1e-7
    assert "not bitwise reproducible" in cell.message and "over 4 repeats" in cell.message


def test_deterministic_repeats_have_zero_spread_and_the_option_overrides(two_gpus: Path) -> None:
    s = Scenario("square", "gradient", square_sum, X, dtypes=("float32",))
    (plain,) = check([s], backends=["torch-rev"], devices=["cuda:0"]).cells
    assert plain.repeat_spread is None
    (repeated,) = check([s], backends=["torch-rev"], devices=["cuda:0"], repeats=3).cells
    assert repeated.repeat_spread == 0.0 and "reproducible" not in repeated.message


def test_repeat_spread_is_zero_only_for_identical_bits() -> None:
    a = np.array([1.0, np.nan, np.inf])
    assert repeat_spread(a, [a.copy()]) == 0.0
    assert repeat_spread(a, [np.array([1.0 + 1e-12, np.nan, np.inf])]) == pytest.approx(1e-12, rel=1e-3)
    assert repeat_spread(np.array([0.0]), [np.array([-0.0])]) > 0
    assert repeat_spread(a, [np.array([1.0, 2.0, np.inf])]) == np.inf


def _has_cuda() -> bool:
    import torch

    return torch.cuda.is_available()


@pytest.mark.skipif(not _has_cuda(), reason="needs an NVIDIA GPU that torch sees (this machine has none)")
def test_on_a_real_gpu_precision_is_read_and_agreement_holds_for_correct_code(monkeypatch: pytest.MonkeyPatch,
                                                                             tf32_switches) -> None:
    monkeypatch.delenv("GRADCI_DEVICE_INVENTORY", raising=False)
    tf32_switches(True, True)
    cells = by_device(check([mlp_scenario()], backends=["torch-rev", "jax-rev"], devices=["cpu", "cuda:0"]))
    for backend in ("torch-rev", "jax-rev"):
        assert "simulated" not in cells[(backend, "cuda:0", "float32")].precision
        assert cells[(backend, "cuda:0", "float32")].rtol == TF32_TOLERANCE.rtol  # TF32 on, on a GPU
        for dtype in ("float32", "float16", "bfloat16"):
            assert cells[(backend, "cuda:0", dtype)].status == "pass", cells[(backend, "cuda:0", dtype)].message
            agreement = cells[(backend, "cuda:0-vs-cpu", dtype)]
            assert agreement.status == "pass", agreement.message


# --- gradci check through the sandboxed runner ----------------------------------------------------------

SCENARIO_MODULE = '''
import numpy as np
import torch
from gradci import Scenario, current_device


def cuda_only_error(x):
    return 1 + 2e-4 if current_device().startswith("cuda") else 1.0


def scenarios():
    x = np.array([0.3, -0.7, 1.1])
    sin = torch_elementwise(torch.sin, torch.cos, backward_scale=cuda_only_error)
    return [Scenario("cudabug", "gradient", {"numpy": lambda x: np.sum(np.sin(x)),
                                             "torch": lambda x: sin(x).sum()}, x, dtypes=("float32",))]
''' + textwrap.dedent(inspect.getsource(planted.torch_elementwise))  # a checkout's runner cannot import tests/


def test_gradci_check_on_cpu_and_a_simulated_gpu_emits_agreement_cells(two_gpus: Path, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    (repo / "pkg").mkdir(parents=True)
    (repo / "pkg" / "__init__.py").write_text("")
    (repo / "pkg" / "scen.py").write_text(SCENARIO_MODULE)
    (repo / "gradci.toml").write_text(textwrap.dedent('''
        [scenarios]
        modules = ["pkg.scen"]
    '''))
    out = subprocess.run([sys.executable, "-m", "gradci", "check", "--repo", str(repo), "--backends", "torch-rev",
                          "--devices", "cpu,cuda", "--repeats", "2", "--format", "json"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 1, out.stderr
    cells = {cell["device"]: cell for cell in json.loads(out.stdout)}
    assert set(cells) == {"cpu", "cuda:0", "cuda:1", "cuda:0-vs-cpu", "cuda:1-vs-cpu"}
    assert {cells[d]["status"] for d in ("cpu", "cuda:0", "cuda:1")} == {"pass"}
    assert cells["cuda:0-vs-cpu"]["status"] == cells["cuda:1-vs-cpu"]["status"] == "fail"
    assert "simulated cuda:0" in cells["cuda:0"]["precision"]
    assert cells["cuda:0"]["repeat_spread"] == 0.0
    assert cells["cuda:0-vs-cpu"]["repeat_spread"] is None  # a comparison, not a computation


def test_a_runs_own_repeats_win_over_the_repositorys(tmp_path: Path) -> None:
    from gradci.scenarios.contract.matrix import Matrix
    from gradci.worker.job_execution import engine_options
    from gradci.worker.sources import RunRef, Source

    (tmp_path / "gradci.toml").write_text('[scenarios]\nmodules = ["m"]\n[check]\nrepeats = 3\n')
    source = Source(sha="a" * 40, root=str(tmp_path), scenarios=(), backends={}, file_matrix=Matrix())
    builtin = Source(sha=None, root=None, scenarios=(), backends={}, file_matrix=Matrix())
    run = RunRef(id=1, repo_url="/r", revision=None, matrix=Matrix())
    asking = RunRef(id=2, repo_url="/r", revision=None, matrix=Matrix(), options={"repeats": 5})
    assert engine_options(source, run) == {"repeats": 3}
    assert engine_options(source, asking) == engine_options(builtin, asking) == {"repeats": 5}
    assert engine_options(builtin, run) == {}


def test_repeats_must_be_a_whole_number(tmp_path: Path) -> None:
    from gradci.cli.check import EXIT_USAGE, run_check
    from gradci.scenarios.authoring.project import ProjectError, load_project
    from gradci.scenarios.contract.matrix import Matrix

    assert run_check(None, Matrix(), "json", None, repeats=0) == EXIT_USAGE
    (tmp_path / "gradci.toml").write_text('[scenarios]\nmodules = ["m"]\n[check]\nrepeats = 1.5\n')
    with pytest.raises(ProjectError, match=r"\[check\] repeats must be a whole number of at least 1, not 1.5"):
        load_project(tmp_path)


# --- the service: a GPU job stores its agreement cells ---------------------------------------------------

SERVICE_TOML = '''
[scenarios]
modules = ["pkg.scen"]
[matrix]
backends = ["torch-rev"]
[check]
repeats = 3
'''


@pytest.mark.integration
def test_a_run_on_cpu_and_a_simulated_gpu_stores_agreement_cells(postgres_database: str, redis_url: str,
                                                                tmp_path: Path) -> None:
    from fastapi.testclient import TestClient

    from gradci._testing.databases import emptied
    from gradci._testing.processes import stop
    from gradci._testing.repos import make_repository
    from gradci._testing.service import results_of, running_service, start_worker
    from gradci.services.settings import Settings
    from gradci.web.app import create_app as create_dashboard

    inventory = tmp_path / "gpus.json"
    inventory.write_text(json.dumps(GPUS[:1]))
    repo = tmp_path / "repo"
    (repo / "pkg").mkdir(parents=True)
    (repo / "pkg" / "__init__.py").write_text("")
    sha = make_repository(repo, {"gradci.toml": SERVICE_TOML, "pkg/scen.py": SCENARIO_MODULE})
    logs = tmp_path / "logs"
    logs.mkdir()
    with running_service(emptied(postgres_database), redis_url, tmp_path / "work", logs, repo=repo, sha=sha,
                         concurrency=1, worker_heartbeat_s="1", device_inventory=str(inventory)) as service:
        gpu_worker = start_worker(service.env, logs, "cuda:0", None, log="worker-cuda0.log")
        try:
            run = service.wait_finished(service.submit(devices=["cpu", "cuda"]))
        finally:
            stop(gpu_worker)
        # The reports and the dashboard take the agreement device as any other.
        with service.client() as client:
            shown = {path: client.get(path) for path in (f"/api/runs/{run['id']}/report",
                                                         f"/api/runs/{run['id']}/junit.xml")}
            # Checking a failed agreement cell again takes both of its devices.
            rerun = client.post(f"/api/runs/{run['id']}/rerun")
            assert rerun.status_code == 201, rerun.text
            assert client.get(f"/api/runs/{rerun.json()['id']}").json()["matrix"]["devices"] == ["cpu", "cuda"]
            client.post(f"/api/runs/{rerun.json()['id']}/cancel")
    # A run of a path on the workers' disk is the operator's: the page is read as gradci up's local user.
    settings = Settings(database_url=service.database_url, broker_url=redis_url, workdir=tmp_path / "work",
                        read_access="local")
    with TestClient(create_dashboard(settings), base_url="http://127.0.0.1") as dashboard:
        shown["run page"] = dashboard.get(f"/runs/{run['id']}")
    assert all(response.status_code == 200 for response in shown.values()), shown
    assert all("cuda-vs-cpu" in response.text for response in shown.values())
    cells = {cell.device: cell for cell in results_of(service.database_url, run["id"])}
    assert run["status"] == "failed", run
    assert {device: cell.status for device, cell in cells.items()} == {
        "cpu": "pass", "cuda": "pass", "cuda-vs-cpu": "fail"}, (logs / "worker-cuda0.log").read_text()[-3000:]
    assert "GPU and CPU disagree" in cells["cuda-vs-cpu"].message
    assert "simulated cuda:0" in cells["cuda"].precision
    assert cells["cpu"].repeat_spread == cells["cuda"].repeat_spread == 0.0  # gradci.toml's [check] repeats


def test_a_comparison_asked_for_both_ways_comes_once(two_gpus: Path) -> None:
    s = Scenario("square", "gradient", square_sum, np.array([1.0, 2.0]), dtypes=("float32",))
    report = check([s], backends=["torch-rev"], devices=["cpu", "cuda:0", "cuda:0-vs-cpu"])
    assert sorted(cell.device for cell in report.cells) == ["cpu", "cuda:0", "cuda:0-vs-cpu"]


def test_the_table_names_cells_that_are_not_reproducible() -> None:
    from io import StringIO

    from rich.console import Console

    from gradci.cli.check import render_table
    from gradci.scenarios.contract.cell import Cell

    def cell(spread):
        return Cell(scenario="s", operator="gradient", framework="torch", backend="torch-rev", mode="reverse",
                    device="cuda:0", dtype="float32", status="pass", repeat_spread=spread)

    for spreads, expected in (([0.0, None], False), ([0.0, 1e-9], True)):
        out = StringIO()
        render_table([cell(s) for s in spreads], Console(file=out, width=160))
        assert ("1 cell not bitwise reproducible over their repeats: s (torch-rev, cuda:0, float32)"
                in out.getvalue()) is expected
