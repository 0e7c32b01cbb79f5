"""A user's repository whose own top-level packages are named like gradci's layers in gradci's source
tree — ``scenarios``, ``services``, ``web``, ``worker`` (``tests/data/projects/clashing_names``) —
checked three ways: ``gradci check --repo``, a run on a started service, and the user's own pytest
started at the repository's root. gradci installs one import name, ``gradci``; if it still
installed a top-level ``services`` or ``scenarios``, one of the two packages of that name would
shadow the other in the process: the user's imports or gradci's own would break.

``test_the_users_test_fails_when_an_installed_package_claims_services`` shows the user's test can
fail that way: a ``services`` imported before theirs (as an installed distribution's top-level
package would be) makes it fail.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from gradci._testing.databases import emptied, flushed
from gradci._testing.service import Service, results_of, running_service
from tests.support.projects import project_repository

OUR_NAMES = ("scenarios", "services", "web", "worker")


@pytest.fixture(scope="module")
def user_repository(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    root = tmp_path_factory.mktemp("user") / "clashing_names"
    return root, project_repository("clashing_names", root)


def clean_env(**extra: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith(("GRADCI_", "PYTEST_"))}
    env.pop("PYTHONPATH", None)
    return {**env, **extra}


def test_the_repository_has_packages_named_like_gradcis_layers(user_repository: tuple[Path, str]) -> None:
    repo, _ = user_repository
    assert all((repo / name / "__init__.py").is_file() for name in OUR_NAMES)
    module = (repo / "grad_scenarios.py").read_text()
    assert all(f"import {name}." in module for name in OUR_NAMES) and "from gradci import" in module


@pytest.mark.slow
def test_gradci_check_passes_on_the_repository(user_repository: tuple[Path, str], tmp_path: Path) -> None:
    repo, _ = user_repository
    out = subprocess.run([sys.executable, "-m", "gradci", "check", "--repo", str(repo), "--format", "json"],
                         cwd=tmp_path, env=clean_env(), capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    cells = json.loads(out.stdout)
    assert {(c["scenario"], c["backend"]) for c in cells} == {
        (name, backend) for name in ("pricing/total", "pricing/discounted") for backend in ("fd", "torch-rev")}
    assert {c["status"] for c in cells} == {"pass"}


def users_pytest(repo: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"], cwd=repo,
                          env=clean_env(**env), capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_the_users_own_pytest_passes_at_the_repositorys_root(user_repository: tuple[Path, str]) -> None:
    repo, _ = user_repository
    out = users_pytest(repo)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    assert "2 passed" in out.stdout


@pytest.mark.slow
def test_the_users_test_fails_when_an_installed_package_claims_services(user_repository: tuple[Path, str],
                                                                         tmp_path: Path) -> None:
    """The control: a top-level ``services`` imported at start-up from outside the repository (as
    gradci's own used to be, from site-packages) takes the name; the user's test must then fail."""
    shadow = tmp_path / "site"
    (shadow / "services").mkdir(parents=True)
    (shadow / "services" / "__init__.py").write_text('"""Another distribution\'s top-level services."""\n')
    (shadow / "sitecustomize.py").write_text("import services  # claimed before the user's code runs\n")
    out = users_pytest(user_repository[0], PYTHONPATH=str(shadow))
    assert out.returncode != 0, out.stdout[-3000:]
    assert "services.pricing" in out.stdout, out.stdout[-3000:]


@pytest.fixture(scope="module")
def user_service(postgres_database: str, redis_database: str, user_repository: tuple[Path, str],
                 tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    repo, sha = user_repository
    with running_service(emptied(postgres_database), flushed(redis_database), tmp_path_factory.mktemp("work"),
                         tmp_path_factory.mktemp("logs"), repo=repo, sha=sha, concurrency=1,
                         worker_heartbeat_s="1") as service:
        yield service


@pytest.mark.integration
def test_a_run_of_the_repository_on_the_service_passes(user_service: Service) -> None:
    run = user_service.wait_finished(user_service.submit(), timeout_s=300)
    results = results_of(user_service.database_url, run["id"])
    assert run["status"] == "passed", (run, [(r.scenario, r.backend, r.status, r.message) for r in results])
    assert {(r.scenario, r.backend, r.status) for r in results} == {
        (name, backend, "pass") for name in ("pricing/total", "pricing/discounted") for backend in ("fd", "torch-rev")}
