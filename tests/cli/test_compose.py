"""docker-compose.yml and the Dockerfile stay in step with the code: every gradci service runs a
real `gradci` subcommand with options it accepts, and every GRADCI_ variable they set is a setting."""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import typer

from gradci.cli.commands import app
from gradci.services.settings import Settings

yaml = pytest.importorskip("yaml")

ROOT = Path(__file__).resolve().parents[2]
EXPECTED_SERVICES = {"postgres", "redis", "migrate", "api", "worker-cpu", "worker-cuda"}


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def gradci_services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Services built from this repository's image (the others are postgres and redis)."""
    return {name: service for name, service in compose["services"].items() if "build" in service}


def setting_names() -> set[str]:
    """The settings, and GRADCI_SECRETS_DIR, which says where the secret ones are read from."""
    from gradci.services.settings import SECRETS_DIR_VARIABLE

    return {f"GRADCI_{name.upper()}" for name in Settings.model_fields} | {SECRETS_DIR_VARIABLE}


def test_the_expected_services_exist(compose: dict[str, Any]) -> None:
    assert set(compose["services"]) == EXPECTED_SERVICES
    assert set(gradci_services(compose)) == {"migrate", "api", "worker-cpu", "worker-cuda"}


def test_every_command_is_a_gradci_subcommand_with_valid_options(compose: dict[str, Any]) -> None:
    group = typer.main.get_command(app)
    for name, service in gradci_services(compose).items():
        assert "entrypoint" not in service, f"{name} must run the image's `gradci` entry point"
        subcommand, *arguments = service["command"]
        assert subcommand in group.commands, f"{name}: `gradci {subcommand}` does not exist"
        # Parsing without running: unknown options or bad values raise here.
        group.commands[subcommand].make_context(subcommand, list(arguments))


def test_a_bad_option_would_be_caught() -> None:
    worker = typer.main.get_command(app).commands["worker"]
    with pytest.raises(Exception, match="--bogus"):
        worker.make_context("worker", ["--device", "cpu", "--bogus"])


def test_every_gradci_variable_is_a_setting(compose: dict[str, Any]) -> None:
    known = setting_names()
    for name, service in gradci_services(compose).items():
        environment = service.get("environment", {})
        gradci_vars = {key for key in environment if key.startswith("GRADCI_")}
        assert environment.get("GRADCI_SECRETS_DIR") == "/run/secrets", name
        assert gradci_vars <= known, f"{name} sets unknown variables {sorted(gradci_vars - known)}"


def test_secrets_are_docker_secrets_never_environment_variables(compose: dict[str, Any]) -> None:
    from gradci.services.settings import SECRET_SETTINGS, secret_file_name

    secret_variables = {f"GRADCI_{name.upper()}" for name in SECRET_SETTINGS}
    declared = set(compose["secrets"])
    for name, service in compose["services"].items():
        environment = service.get("environment", {})
        assert not secret_variables & set(environment), f"{name} passes a secret in its environment"
        assert not any("PASSWORD" in key and not key.endswith("_FILE") for key in environment), name
        assert set(service.get("secrets", [])) <= declared, name
    for name in gradci_services(compose):
        given = set(compose["services"][name]["secrets"])
        assert {secret_file_name(s) for s in ("database_url", "broker_url", "api_token")} <= given, name
    assert all(not str(spec.get("file", "")).startswith("/") for spec in compose["secrets"].values())


def test_workers_get_what_the_sandbox_needs(compose: dict[str, Any]) -> None:
    """Root (to drop runners to their users) and the right to make namespaces; docs/service.md's
    reduced mode is what runs without them."""
    for name in ("worker-cpu", "worker-cuda"):
        worker = compose["services"][name]
        assert worker["user"] == "root", name
        assert "SYS_ADMIN" in worker["cap_add"], name
        assert "apparmor:unconfined" in worker["security_opt"], name
    assert "user" not in compose["services"]["api"]  # the API runs as the image's unprivileged user
    assert "reduced mode" in (ROOT / "docs" / "service.md").read_text().lower()


def test_the_dockerfile_runs_gradci_and_sets_only_settings() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert re.search(r'^ENTRYPOINT \["gradci"\]$', dockerfile, re.MULTILINE)
    variables = set(re.findall(r"^ENV (GRADCI_\w+)=", dockerfile, re.MULTILINE))
    assert variables and variables <= setting_names()


def test_the_gpu_worker_reserves_an_nvidia_device_and_uses_cuda_builds(compose: dict[str, Any]) -> None:
    worker = compose["services"]["worker-cuda"]
    (device,) = worker["deploy"]["resources"]["reservations"]["devices"]
    assert device["driver"] == "nvidia" and "gpu" in device["capabilities"]
    assert worker["build"]["args"]["ACCELERATOR"] == "cuda12"
    assert worker["command"][:3] == ["worker", "--device", "cuda:0"]
    assert compose["services"]["worker-cpu"]["command"][:3] == ["worker", "--device", "cpu"]
