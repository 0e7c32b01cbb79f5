"""The deployment files stay in step with the code: docker-compose.yml (one machine), the compose file of
each role of a service on several machines (deploy/compose/: the servers' host, a worker host) and the
systemd units (deploy/systemd/). Every gradci service runs a real `gradci` subcommand with options it
accepts, every GRADCI_ variable they set is a setting, and secrets are files, never environment
variables."""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import typer

from gradci.cli.commands import app
from gradci.services.settings import SECRET_SETTINGS, Settings, secret_file_name

yaml = pytest.importorskip("yaml")

ROOT = Path(__file__).resolve().parents[2]
# Each compose file and the services it runs.
COMPOSE_FILES = {
    "docker-compose.yml": {"postgres", "redis", "migrate", "api", "worker-cpu", "worker-cuda"},
    "deploy/compose/docker-compose.api.yml": {"postgres", "redis", "migrate", "api"},
    "deploy/compose/docker-compose.worker.yml": {"worker-cpu", "worker-cuda"},
}
ROLE_SECRETS = ROOT / "deploy" / "compose" / "role-secrets.sh"
SYSTEMD_UNITS = {"gradci-api.service": "api", "gradci-worker@.service": "worker"}


@pytest.fixture(scope="module", params=sorted(COMPOSE_FILES))
def compose_file(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture(scope="module")
def compose(compose_file: str) -> dict[str, Any]:
    return yaml.safe_load((ROOT / compose_file).read_text())


def gradci_services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Services built from this repository's image (the others are postgres and redis)."""
    return {name: service for name, service in compose["services"].items() if "build" in service}


def setting_names() -> set[str]:
    """The settings, and GRADCI_SECRETS_DIR, which says where the secret ones are read from."""
    from gradci.services.settings import SECRETS_DIR_VARIABLE

    return {f"GRADCI_{name.upper()}" for name in Settings.model_fields} | {SECRETS_DIR_VARIABLE}


def gradci_commands() -> Any:
    """The ``gradci`` command group (typer's: it has ``commands``)."""
    return typer.main.get_command(app)


def assert_a_gradci_command(where: str, argv: list[str]) -> None:
    group = gradci_commands()
    subcommand, *arguments = argv
    assert subcommand in group.commands, f"{where}: `gradci {subcommand}` does not exist"
    # Parsing without running: unknown options or bad values raise here.
    group.commands[subcommand].make_context(subcommand, list(arguments))


def test_the_expected_services_exist(compose_file: str, compose: dict[str, Any]) -> None:
    assert set(compose["services"]) == COMPOSE_FILES[compose_file]
    assert set(gradci_services(compose)) == COMPOSE_FILES[compose_file] - {"postgres", "redis"}


def test_every_command_is_a_gradci_subcommand_with_valid_options(compose: dict[str, Any]) -> None:
    for name, service in gradci_services(compose).items():
        assert "entrypoint" not in service, f"{name} must run the image's `gradci` entry point"
        assert_a_gradci_command(name, service["command"])


def test_a_bad_option_would_be_caught() -> None:
    worker = gradci_commands().commands["worker"]
    with pytest.raises(Exception, match="--bogus"):
        worker.make_context("worker", ["--device", "cpu", "--bogus"])


def test_every_image_is_built_from_this_repository(compose_file: str, compose: dict[str, Any]) -> None:
    folder = (ROOT / compose_file).parent
    for name, service in gradci_services(compose).items():
        assert (folder / service["build"]["context"]).resolve() == ROOT, name
        assert "dockerfile" not in service["build"], name  # the repository's Dockerfile


def test_every_gradci_variable_is_a_setting(compose: dict[str, Any]) -> None:
    known = setting_names()
    for name, service in gradci_services(compose).items():
        environment = service.get("environment", {})
        gradci_vars = {key for key in environment if key.startswith("GRADCI_")}
        assert environment.get("GRADCI_SECRETS_DIR") == "/run/secrets", name
        assert gradci_vars <= known, f"{name} sets unknown variables {sorted(gradci_vars - known)}"


def test_secrets_are_docker_secrets_never_environment_variables(compose: dict[str, Any]) -> None:
    secret_variables = {f"GRADCI_{name.upper()}" for name in SECRET_SETTINGS}
    declared = set(compose["secrets"])
    for name, service in compose["services"].items():
        environment = service.get("environment", {})
        assert not secret_variables & set(environment), f"{name} passes a secret in its environment"
        assert not any("PASSWORD" in key and not key.endswith("_FILE") for key in environment), name
        assert set(service.get("secrets", [])) <= declared, name
    for name in gradci_services(compose):
        given = set(compose["services"][name]["secrets"])
        needed = ("database_url", "broker_url") + (("api_token",) if name in ("api", "migrate") else ())
        assert {secret_file_name(s) for s in needed} <= given, name
    assert all(not str(spec.get("file", "")).startswith("/") for spec in compose["secrets"].values())


def test_workers_get_what_the_sandbox_needs(compose: dict[str, Any]) -> None:
    """Root (to give each runner a fresh uid) and the right to make namespaces; without them the
    worker refuses repository code, as docs/security.md says."""
    for name in ("worker-cpu", "worker-cuda"):
        if name not in compose["services"]:
            continue
        worker = compose["services"][name]
        assert worker["user"] == "root", name
        assert "SYS_ADMIN" in worker["cap_add"], name
        assert "apparmor:unconfined" in worker["security_opt"], name
    if "api" in compose["services"]:
        assert "user" not in compose["services"]["api"]  # the API runs as the image's unprivileged user
    assert "--unsandboxed" in (ROOT / "docs" / "security.md").read_text()
    assert "bubblewrap" in (ROOT / "Dockerfile").read_text()


def test_the_dockerfile_runs_gradci_and_sets_only_settings() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert re.search(r'^ENTRYPOINT \["gradci"\]$', dockerfile, re.MULTILINE)
    variables = set(re.findall(r"^ENV (GRADCI_\w+)=", dockerfile, re.MULTILINE))
    assert variables and variables <= setting_names()


def test_the_gpu_worker_reserves_an_nvidia_device_and_uses_cuda_builds(compose: dict[str, Any]) -> None:
    if "worker-cuda" not in compose["services"]:
        return
    worker = compose["services"]["worker-cuda"]
    (device,) = worker["deploy"]["resources"]["reservations"]["devices"]
    assert device["driver"] == "nvidia" and "gpu" in device["capabilities"]
    assert worker["build"]["args"]["ACCELERATOR"] == "cuda12"
    assert worker["profiles"] == ["gpu"]
    assert worker["command"][:3] == ["worker", "--device", "cuda:0"]
    assert compose["services"]["worker-cpu"]["command"][:3] == ["worker", "--device", "cpu"]


# --- several hosts: the servers' host and the worker hosts ------------------------------------------


def role_compose(role: str) -> dict[str, Any]:
    return yaml.safe_load((ROOT / f"deploy/compose/docker-compose.{role}.yml").read_text())


def test_the_servers_host_publishes_postgres_and_redis_only_on_the_workers_network() -> None:
    services = role_compose("api")["services"]
    for name, port in (("postgres", 5432), ("redis", 6379)):
        (published,) = services[name]["ports"]
        assert re.fullmatch(rf"\$\{{SERVERS_ADDRESS:\?[^}}]+\}}:{port}:{port}", published), published
    assert "--requirepass" in " ".join(services["redis"]["command"])  # other hosts reach it: a password
    assert "--appendonly yes" in " ".join(services["redis"]["command"])


def test_a_worker_host_runs_no_server_and_keeps_its_own_state() -> None:
    compose = role_compose("worker")
    assert not {"postgres", "redis", "api", "migrate"} & set(compose["services"])
    for name, service in compose["services"].items():
        assert "depends_on" not in service, name  # its servers are on another host
        (volume,) = service["volumes"]
        assert volume.endswith(":/var/lib/gradci") and volume.split(":")[0] in compose["volumes"], name


def test_role_secrets_writes_every_secret_the_role_files_name(tmp_path: Path) -> None:
    if shutil.which("bash") is None or shutil.which("python3") is None:
        pytest.skip("role-secrets.sh needs bash and python3")
    script = tmp_path / ROLE_SECRETS.name
    shutil.copy(ROLE_SECRETS, script)
    subprocess.run(["bash", str(script), "10.0.0.10"], check=True, capture_output=True, timeout=60)
    first = {path: path.read_text() for path in (tmp_path / "secrets").rglob("*") if path.is_file()}
    subprocess.run(["bash", str(script), "10.0.0.99"], check=True, capture_output=True, timeout=60)
    assert {path: path.read_text() for path in first} == first  # written once, never overwritten
    for role in ("api", "worker"):
        for name, spec in role_compose(role)["secrets"].items():
            assert (tmp_path / spec["file"]).is_file(), f"{role}: {name}"
    secrets = tmp_path / "secrets"
    password, redis = (secrets / "api" / "postgres_password").read_text(), (secrets / "api" / "redis_password").read_text()
    assert (secrets / "api" / "gradci_database_url").read_text() == f"postgresql+psycopg://gradci:{password}@postgres:5432/gradci"
    assert (secrets / "worker" / "gradci_database_url").read_text() == \
        f"postgresql+psycopg://gradci:{password}@10.0.0.10:5432/gradci"
    assert (secrets / "worker" / "gradci_broker_url").read_text() == f"redis://:{redis}@10.0.0.10:6379/0"
    assert not (secrets / "worker" / "gradci_api_token").exists()  # a worker host needs no API token
    assert secrets.stat().st_mode & 0o077 == 0


def unit_entries(text: str) -> dict[str, list[str]]:
    """``Key=value`` lines of a systemd unit, every value of a key in order (sections merged)."""
    entries: dict[str, list[str]] = {}
    for line in text.splitlines():
        if line.strip() and not line.startswith(("#", ";", "[")):
            key, _, value = line.partition("=")
            entries.setdefault(key.strip(), []).append(value.strip())
    return entries


@pytest.mark.parametrize("unit", sorted(SYSTEMD_UNITS))
def test_the_systemd_units_run_gradci_with_settings_and_credentials(unit: str) -> None:
    entries = unit_entries((ROOT / "deploy" / "systemd" / unit).read_text())
    for command in entries.get("ExecStartPre", []) + entries["ExecStart"]:
        program, *argv = command.replace("%i", "cpu").split()
        assert program == "/opt/gradci/.venv/bin/gradci", command
        assert_a_gradci_command(unit, argv)
    environment = dict(item.split("=", 1) for item in entries["Environment"])
    assert environment["GRADCI_SECRETS_DIR"] == "%d"  # the unit's credentials directory
    assert set(environment) <= setting_names()
    assert not {f"GRADCI_{name.upper()}" for name in SECRET_SETTINGS} & set(environment)
    credentials = {item.split(":", 1)[0] for item in entries["LoadCredential"]}
    assert {secret_file_name("database_url"), secret_file_name("broker_url")} <= credentials
    assert credentials <= {secret_file_name(name) for name in SECRET_SETTINGS}
    if SYSTEMD_UNITS[unit] == "worker":
        assert entries["User"] == ["root"]  # the sandbox
        assert entries["ExecStart"] == ["/opt/gradci/.venv/bin/gradci worker --device %i"]
    else:
        assert entries["User"] != ["root"]
        assert secret_file_name("api_token") in credentials
