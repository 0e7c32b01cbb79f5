"""Untrusted scenario code on the real service path (PostgreSQL, Redis, the API over HTTP and a
``gradci worker --concurrency 2``): it reaches no secret and writes nowhere but its scratch folder,
and scenarios that crash, hang, exhaust memory, exit or flood their output each become one error
cell while the rest of the run passes and the worker stays up.

Every secret the service holds contains MARK; the probe scenario looks for MARK in everything it
can read (its environment, every /proc/<pid>/environ, the service's files) and reports where.
"""
from __future__ import annotations

import importlib.util
import os
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from gradci._testing.databases import emptied, flushed
from gradci._testing.repos import git, make_repository
from gradci._testing.service import TOKEN, Service, assert_each_cell_once, jobs_of, results_of, running_service
from gradci.services.settings import write_secrets_dir

pytestmark = pytest.mark.integration

MARK = "s3cr3t"
GITHUB_TOKEN = f"ghp_{MARK}_github"
WEBHOOK_SECRET = f"{MARK}-webhook"
DB_PASSWORD = f"{MARK}-db"  # PostgreSQL trusts local connections here: any password connects
OUTPUT_MB = 8

SCENARIOS = '''
import ctypes
import glob
import os
import socket
import sys
import time

import numpy as np

from gradci import Scenario
from gradci.scenarios.authoring.namespace import namespace

MARK = {mark_start!r} + {mark_end!r}  # split: this file itself holds no secret
SERVICE_FILES = {service_files!r}
WRITE_TARGETS = {write_targets!r}
DATABASE_PORT = 5432


def smooth(x):
    xp = namespace(x)
    return xp.sum(xp.sin(x) * x)


def _readable(path):
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except OSError:
        return None


def secrets_found():
    """Where MARK could be read, and how many environments of processes were readable."""
    found, environs = [], 0
    if any(MARK in value for value in os.environ.values()):
        found.append("os.environ")
    for folder in glob.glob("/proc/[0-9]*"):  # every process's environment, ancestors included
        data = _readable(folder + "/environ")
        environs += data is not None
        if data and MARK.encode() in data:
            found.append(folder)
    for root in SERVICE_FILES:
        for path in [root] + [os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs]:
            data = _readable(path)
            if data and MARK.encode() in data:
                found.append(path)
    return found, environs


def probe(x):
    found, environs = secrets_found()
    wrote = []
    for target in WRITE_TARGETS + [os.path.join(os.getcwd(), "mine"), "/tmp/gradci-probe"]:
        try:
            with open(target, "w") as handle:
                handle.write("x")
            wrote.append(target)
        except OSError:
            pass
    try:
        socket.create_connection(("127.0.0.1", DATABASE_PORT), timeout=2).close()
        network = "database reachable"
    except OSError as exc:
        network = "no network"
    raise RuntimeError(f"found={{found}} wrote={{wrote}} {{network}} environs={{environs}} uid={{os.getuid()}}")


def segfault(x):
    return ctypes.string_at(0)


def endless(x):
    while True:
        pass


def allocate(x):
    return float(np.ones((64 << 30) // 8).sum())  # 64 GiB: over the address-space limit


def exits(x):
    os._exit(3)


FLOODED = []


def floods(x):
    if not FLOODED:  # once: finite differences call the function many times
        FLOODED.append(True)
        line = "flood " * 170 + "\\n"
        for _ in range({output_mb} * 1024):
            sys.stdout.write(line)
    return smooth(x)


def vector(x):
    return x * 2  # a gradient needs a scalar


def nan(x):
    return namespace(x).sum(x) * float("nan")


def text(x):
    return "not an array"


def scenarios():
    x = np.array([0.3, -0.2, 0.7])
    made = [Scenario(f"ok/{{i}}", "gradient", smooth, x * (i + 1), dtypes=("float64",)) for i in range(4)]
    for function in (probe, segfault, endless, allocate, exits, floods, vector, nan, text):
        made.append(Scenario(f"bad/{{function.__name__}}", "gradient", function, x, dtypes=("float64",)))
    return made
'''

GRADCI_TOML = '[scenarios]\nmodules = ["{module}"]\n[matrix]\nbackends = ["fd"]\ndtypes = ["float64"]\n'


@pytest.fixture(scope="module")
def sandboxed_service(postgres_database: str, redis_database: str,
                      tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    """``gradci api`` and a ``gradci worker --concurrency 2`` whose own files hold secrets, checking a
    repository of scenarios that probe for them, crash, hang or flood (written here: they name this
    test's folders and secrets)."""
    from sqlalchemy.engine import make_url

    base = tmp_path_factory.mktemp("sandbox")
    workdir, logs, home = base / "work", base / "logs", base / "service-home"
    for folder in (workdir, logs, home):
        folder.mkdir()
    # The service's own files, each holding a secret: the runner must read none of them.
    write_secrets_dir(workdir / "secrets", {"github_token": GITHUB_TOKEN, "github_webhook_secret": WEBHOOK_SECRET})
    (workdir / "gradci.db").write_text(f"an embedded database mentioning {MARK}")
    (home / ".env").write_text(f"GRADCI_API_TOKEN={TOKEN}-{MARK}\n")
    repo = base / "repo"
    sha = make_repository(repo, {
        "gradci.toml": GRADCI_TOML.format(module="service_scenarios"),
        "service_scenarios.py": textwrap.dedent(SCENARIOS.format(
            mark_start=MARK[:3], mark_end=MARK[3:], service_files=[str(workdir), str(home)], output_mb=OUTPUT_MB,
            write_targets=[str(workdir / "written"), str(home / "written"), str(workdir / "checkouts" / "written"),
                           str(repo / "written")])),
        "broken_at_import.py": "raise RuntimeError('this module is broken')\n",
        "hangs_at_import.py": "import time\nwhile True:\n    time.sleep(1)\n",
    })
    database_url = make_url(postgres_database).set(password=DB_PASSWORD).render_as_string(hide_password=False)
    with running_service(emptied(database_url), flushed(redis_database), workdir, logs, repo=repo, sha=sha,
                         concurrency=2, worker_heartbeat_s="1", job_chunk_size="3",
                         # Jobs cut by count: cut by the earlier tests' timings, a slow machine's probe
                         # priced every untimed scenario over the target and made each a job of its own.
                         job_balance="false", cell_timeout_s="5", runner_memory_limit_mb="4096", runner_output_limit_kb="16",
                         scenario_import_timeout_s="5", secrets_dir=str(workdir / "secrets")) as the_service:
        yield the_service


def test_the_probe_finds_the_secrets_outside_the_sandbox(sandboxed_service: Service) -> None:
    """The control: run by this (root, unconfined) process, the probe finds the secrets in the
    worker's environment and the service's files — so its "found nothing" below means something."""
    spec = importlib.util.spec_from_file_location("probe_control", sandboxed_service.repo / "service_scenarios.py")
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    found, environs = module.secrets_found()
    assert sandboxed_service.worker is not None and f"/proc/{sandboxed_service.worker.pid}" in found
    assert str(sandboxed_service.workdir / "secrets" / "gradci_github_token") in found
    assert str(sandboxed_service.workdir / "gradci.db") in found and environs > 0


def test_scenario_code_reaches_no_secret_and_writes_only_its_scratch(sandboxed_service: Service) -> None:
    Path("/tmp/gradci-probe").unlink(missing_ok=True)  # the probe's target on this machine's /tmp
    run_id = sandboxed_service.submit(scenarios=["bad/probe"])
    run = sandboxed_service.wait_finished(run_id)
    (result,) = results_of(sandboxed_service.database_url, run_id)
    message = result.message
    assert result.status == "error" and "found=" in message, message
    assert "found=[]" in message, message
    assert "environs=0 " in message, message  # not even its own: the runner is not dumpable
    # Only its scratch folder and its private /tmp took a write; the machine's /tmp has nothing.
    wrote = message.split("wrote=")[1].split("]")[0]
    assert wrote.count("'") == 4 and "/mine'" in wrote and "'/tmp/gradci-probe'" in wrote, message
    assert not os.path.exists("/tmp/gradci-probe")
    assert "no network" in message and "uid=0" not in message, message
    assert run["status"] == "failed"


def test_secrets_appear_in_no_log_and_no_response(sandboxed_service: Service) -> None:
    run_id = sandboxed_service.submit(scenarios=["ok/0"])
    sandboxed_service.wait_finished(run_id)
    with sandboxed_service.client() as client:
        answers = [client.get(path).text for path in (f"/api/runs/{run_id}", f"/api/runs/{run_id}/results",
                                                      f"/api/runs/{run_id}/report", "/api/workers", "/api/health",
                                                      f"/runs/{run_id}", "/")]
    for text in answers + [path.read_text(errors="replace") for path in sandboxed_service.logs.iterdir()]:
        for secret in (GITHUB_TOKEN, WEBHOOK_SECRET, DB_PASSWORD, TOKEN):
            assert secret not in text


def test_misbehaving_scenarios_are_error_cells_and_the_rest_passes(sandboxed_service: Service) -> None:
    log = sandboxed_service.logs / "gradci.worker.log"
    log_before = log.stat().st_size
    run_id = sandboxed_service.submit(scenarios=["ok/*", "bad/segfault", "bad/endless", "bad/allocate", "bad/exits",
                                       "bad/floods", "bad/vector", "bad/nan", "bad/text"])
    run = sandboxed_service.wait_finished(run_id)
    results = {r.scenario: r for r in results_of(sandboxed_service.database_url, run_id)}
    assert_each_cell_once(list(results.values()))
    assert {name for name, r in results.items() if r.status == "pass"} == {f"ok/{i}" for i in range(4)} | {"bad/floods"}
    expected = {"bad/segfault": "killed by SIGSEGV", "bad/endless": "timeout after 5 s",
                "bad/allocate": "out of memory", "bad/exits": "exited with code 3",
                "bad/vector": "gradient needs f(x) to be a scalar", "bad/nan": "f(x) is not finite",
                "bad/text": "f must return numbers, an array or a pytree of arrays"}
    for name, reason in expected.items():
        assert results[name].status == "error" and reason in results[name].message, (name, results[name].message)
    assert run["status"] == "failed" and run["counts"]["pass"] == 5 and run["counts"]["error"] == 7
    assert len(jobs_of(sandboxed_service.database_url, run_id)) == 4  # chunks of 3: the two pool processes shared them
    # Megabytes printed, a bounded amount logged.
    assert log.stat().st_size - log_before < 512 << 10, log.stat().st_size - log_before
    assert "bytes of the runner's output dropped" in log.read_text(errors="replace")
    assert sandboxed_service.worker is not None and sandboxed_service.worker.poll() is None


@pytest.mark.parametrize(("config", "reason"), [
    (GRADCI_TOML.format(module="broken_at_import"), "RuntimeError: this module is broken"),
    (GRADCI_TOML.format(module="hangs_at_import"), "timeout after 5 s importing"),
    (GRADCI_TOML.format(module="no_such_module"), "cannot import scenario module 'no_such_module'"),
    ("[scenarios\n", "gradci.toml: invalid TOML"),
    ("[matrix]\n", "[scenarios] modules must be a non-empty list of module names"),
    (None, "gradci.toml: not found"),
])
def test_a_project_that_cannot_be_loaded_ends_the_run_with_a_clear_error(
    sandboxed_service: Service, config: str | None, reason: str
) -> None:
    if config is None:
        (sandboxed_service.repo / "gradci.toml").unlink()
    else:
        (sandboxed_service.repo / "gradci.toml").write_text(config)
    git(sandboxed_service.repo, "add", "-A")
    git(sandboxed_service.repo, "commit", "-q", "--allow-empty", "-m", f"a project that fails: {reason}")
    sha = git(sandboxed_service.repo, "rev-parse", "HEAD")
    run = sandboxed_service.wait_finished(sandboxed_service.submit(sha=sha))
    assert run["status"] == "error" and reason in run["error_message"], run["error_message"]
    assert sandboxed_service.worker is not None and sandboxed_service.worker.poll() is None
    assert sandboxed_service.wait_finished(sandboxed_service.submit(scenarios=["ok/1"]))["status"] == "passed"
