"""``gradci up``: the whole service on one machine, with nothing to install or configure.

Migrations, the API on 127.0.0.1 and one ``gradci worker`` per local device, all supervised. With
no ``GRADCI_DATABASE_URL``/``GRADCI_BROKER_URL`` it runs embedded (SQLite database, SQLite broker
transport) under ``.gradci/``; with them, against Postgres and Redis like a deployment would.
``--demo`` submits the built-in suite through the API like any client and reports on it (``gradci.cli.demo``).
"""
from __future__ import annotations

import os
import secrets
import signal
import socket
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console

from gradci.cli.client import ClientError, GradciClient, token_file
from gradci.cli.demo import demo_exit_code, demo_matrices, run_demo
from gradci.cli.supervisor import Supervisor
from gradci.scenarios.contract.matrix import Matrix
from gradci.services.api.access import is_loopback_host
from gradci.services.secrecy import forbid_inspection
from gradci.services.settings import SECRET_SETTINGS, SECRETS_DIR_VARIABLE, Settings, get_settings, write_secrets_dir

if TYPE_CHECKING:
    from fastapi import FastAPI

READY_TIMEOUT_S = 180.0


def api_refusal(settings: Settings, host: str, no_auth: bool) -> str | None:
    """Why ``gradci api`` must not start as asked (None: it may).

    Without a token every write is open — runs of any path on the workers' disk, cancels — so that is
    said out loud (``--no-auth``), and then only on loopback.
    """
    if settings.api_token is None and not no_auth:
        return ("no API token: set GRADCI_API_TOKEN (or the secret file gradci_api_token); without one anyone who "
                "reaches the API may start and cancel runs. --no-auth serves without one, on loopback only")
    if no_auth and settings.api_token is None and not is_loopback_host(host):
        return f"--no-auth serves writes without a credential: only on a loopback address, not {host}"
    return None


def read_access_for_up(settings: Settings, public_read: bool) -> tuple[str | None, str | None]:
    """The read access of ``gradci up``'s API, and why it must not start.

    Returns (read_access, why it must not start). On loopback it is one person's tool, whose user sees
    everything without signing in; reachable from elsewhere it needs sign-in configured or
    ``--public-read`` said explicitly. A GRADCI_READ_ACCESS set by hand is kept.
    """
    if "read_access" in settings.model_fields_set:
        return settings.read_access, None
    if is_loopback_host(settings.api_host):
        return "local", None
    if public_read:
        return "open", None
    if settings.login_configured:
        return "public", None
    return None, (f"gradci up on {settings.api_host} is reachable from other machines, and would show every run to "
                  "anyone: configure sign-in with GitHub (GRADCI_GITHUB_OAUTH_CLIENT_ID and "
                  "GRADCI_GITHUB_OAUTH_CLIENT_SECRET), or say --public-read")


def serve_api(host: str, port: int, workers: int = 1, no_auth: bool = False) -> int:
    """Serve the FastAPI app under uvicorn, as ``gradci api`` does, and return the exit code.

    It serves in this process, or in ``workers`` processes that uvicorn starts and restarts (this one
    then only watches them). Returns 2 when it must not start.
    """
    import uvicorn

    refusal = api_refusal(get_settings(), host, no_auth)
    if refusal is not None:
        Console(stderr=True, soft_wrap=True).print(f"error: {refusal}", markup=False, highlight=False)
        return 2
    forbid_inspection()
    uvicorn.run("gradci.cli.serve:api_app", factory=True, host=host, port=port, log_level="info",
                proxy_headers=True, workers=workers)
    return 0


def api_app() -> FastAPI:
    """The app, made in the process that serves it.

    uvicorn's worker processes are started afresh (``exec``), which makes them inspectable again: each
    hides its settings' secrets as its parent does. web.app adds the dashboard pages (where commit
    statuses link) to the REST API.
    """
    from gradci.web.app import create_app

    forbid_inspection()
    return create_app()


def ensure_api_token(settings: Settings, console: Console) -> str:
    """GRADCI_API_TOKEN, else the stored one, else a new one stored (readable by its owner only) and printed."""
    if settings.api_token is not None:
        return settings.api_token.get_secret_value()
    path = token_file(settings)
    if path.is_file() and path.read_text().strip():
        token = path.read_text().strip()
        console.print(f"API token: stored in {path}", markup=False, highlight=False)
        return token
    token = secrets.token_urlsafe(32)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(token + "\n")
    console.print(f"API token: {token}  (stored in {path}; writes need 'Authorization: Bearer <token>')",
                  markup=False, highlight=False)
    return token


def port_is_free(host: str, port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex((host, port)) != 0


def child_environment(settings: Settings, port: int, token: str, read_access: str) -> dict[str, str]:
    """The children's environment: the same settings, with every secret kept out of it.

    The workdir is made absolute, and every secret (the token made here included) goes in a folder only
    this user reads, never in their environment — /proc keeps a process's initial environment for as
    long as it lives.
    """
    secrets_dir = Path(settings.workdir) / "secrets"
    values = {field: getattr(settings, field) for field in SECRET_SETTINGS}
    values = {field: value.get_secret_value() if hasattr(value, "get_secret_value") else value
              for field, value in values.items() if value}
    write_secrets_dir(secrets_dir, {**values, "api_token": token})
    secret_variables = {f"GRADCI_{field}".upper() for field in SECRET_SETTINGS}
    env = {name: value for name, value in os.environ.items() if name.upper() not in secret_variables}
    return {**env, "GRADCI_WORKDIR": str(settings.workdir), "GRADCI_API_PORT": str(port),
            "GRADCI_READ_ACCESS": read_access, SECRETS_DIR_VARIABLE: str(secrets_dir)}


def start_services(settings: Settings, port: int, token: str, devices: list[str], supervisor: Supervisor,
                   read_access: str) -> None:
    env = child_environment(settings, port, token, read_access)
    logs = Path(settings.workdir) / "logs"
    # -P: the folder `gradci up` runs in is no import root of the API and workers: a folder named
    # gradci there (its own workdir, say) must not become the `gradci` package of an editable install.
    gradci = [sys.executable, "-P", "-m", "gradci"]
    supervisor.add("api", [*gradci, "api", "--host", settings.api_host, "--port", str(port)], env, logs / "api.log")
    for device in devices:
        supervisor.add(f"worker {device}", [*gradci, "worker", "--device", device], env,
                       logs / f"worker-{device.replace(':', '')}.log")


def wait_until_ready(client: GradciClient, supervisor: Supervisor, devices: list[str]) -> None:
    """The API answers, and a worker of every device has registered."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    while True:
        supervisor.poll()
        try:
            health = client.health()
            online = health.get("workers_online", {})
            if all(online.get(device, 0) for device in devices):
                return
        except ClientError:
            pass
        if time.monotonic() > deadline:
            raise ClientError(f"the service was not ready after {READY_TIMEOUT_S:g} s")
        time.sleep(0.5)


def up(*, port: int, demo: bool, exit_after: bool, matrix: Matrix = Matrix(), public_read: bool = False) -> int:
    from gradci.scenarios.contract.simulated_gpus import InventoryError
    from gradci.services.db.migrate import upgrade
    from gradci.worker.device_discovery import discover_devices

    console = Console()
    forbid_inspection()
    # `docker stop` and service managers send SIGTERM: stop the children as Ctrl-C does. SIGINT is
    # set too because a process can start with it ignored (a script's `gradci up &`, nohup), and
    # Python then leaves it ignored: `kill -INT` would do nothing (uvicorn and Celery set both too).
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, signal.default_int_handler)
    settings = get_settings()
    settings.ensure_local_directories()
    read_access, refusal = read_access_for_up(settings, public_read)
    if read_access is None:
        console.print(f"error: {refusal}", markup=False, highlight=False, soft_wrap=True)
        return 2
    if not port_is_free(settings.api_host, port):
        console.print(f"error: port {port} on {settings.api_host} is in use (try --port)")
        return 2
    try:
        devices = [device.name for device in discover_devices()]
    except InventoryError as exc:
        console.print(f"error: {exc}", markup=False, highlight=False, soft_wrap=True)
        return 2
    upgrade(settings.database_url)
    token = ensure_api_token(settings, console)
    server = f"http://{settings.api_host}:{port}"
    supervisor = Supervisor()
    try:  # from the first child on: whatever stops this process stops them too
        start_services(settings, port, token, devices, supervisor, read_access)
        with GradciClient(server, token) as client:
            wait_until_ready(client, supervisor, devices)
            console.print(f"gradci is up: {server}/docs (workers: {', '.join(devices)}; logs in "
                          f"{Path(settings.workdir) / 'logs'})", markup=False, highlight=False)
            runs = run_demo(client, supervisor, console, demo_matrices(matrix)) if demo else []
        if exit_after:
            return demo_exit_code(runs)
        console.print("serving; Ctrl-C stops", markup=False)
        supervisor.serve_forever()
    except ClientError as exc:
        console.print(f"error: {exc}", markup=False, highlight=False)
        return 1
    except KeyboardInterrupt:
        return 0
    finally:
        supervisor.stop()
    return 0

