"""Every knob of the service in one typed object, read from ``GRADCI_*`` environment variables.

Unset URLs fall back to the embedded, server-less mode: an SQLite database and an SQLite-backed
Celery transport, both under ``workdir``. The fallbacks are made absolute when the settings are
built so that the API and the worker processes it starts agree on the same files whatever their
current directory.
"""
from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from gradci.services.database_urls import ensure_sqlite_directory, normalize_database_url

EMBEDDED_DATABASE_FILE = "gradci.db"
EMBEDDED_BROKER_FILE = "broker.db"
EMBEDDED_BROKER_SCHEMES = ("sqla+", "sqlalchemy+")
# Redis redelivers a task not acknowledged within the visibility timeout; it must outlive the
# hard time limit or a long job is handed to a second worker while the first still runs it.
VISIBILITY_MARGIN_S = 600


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="GRADCI_", extra="ignore")

    # Storage and queue, resolved once when the settings are built: unset (or empty) means the
    # embedded default under workdir (see _resolve_urls), so callers never test or convert them.
    database_url: str = ""
    broker_url: str = ""
    workdir: Path = Path(".gradci")

    # API
    api_token: SecretStr | None = None
    public_url: str | None = None  # how people reach the dashboard; None: the request's own base URL
    api_host: str = "127.0.0.1"
    api_port: int = 8000

    # Reads (services/access/): who may see a repository's runs. "public": anyone sees the built-in
    # library's and public GitHub repositories' runs, the rest only those GitHub lets read them (a
    # login) and read tokens; "login": nothing without a login or a token; "open": every run to anyone
    # who reaches the server (``--public-read``); "local": everything, workers and metrics too, to
    # requests addressed to a loopback name (``gradci up`` on 127.0.0.1: one person's tool).
    # ``operators``: GitHub logins that see everything as the admin token does.
    read_access: Literal["public", "login", "open", "local"] = "public"
    operators: Annotated[list[str], NoDecode] = Field(default_factory=list)
    # How long GitHub's answer to "may this credential read that repository" is kept (seconds): a
    # user removed from a repository stops seeing it within this time.
    github_access_ttl_s: float = Field(300.0, gt=0, le=3600)
    # Sign-in with GitHub (an OAuth App, or the GitHub App's own client id and secret) and the key
    # that signs the session cookie (unset: derived from the API token).
    github_oauth_client_id: str | None = None
    github_oauth_client_secret: SecretStr | None = None
    # "repo": an OAuth App's token must have it to read a private repository (a GitHub App's user
    # token has the App's permissions instead, and ignores scopes).
    github_oauth_scope: str = "repo"
    session_secret: SecretStr | None = None

    # GitHub
    github_token: SecretStr | None = None
    github_api_url: str = "https://api.github.com"
    github_web_url: str = "https://github.com"  # where people sign in (/login/oauth/...)
    github_webhook_secret: SecretStr | None = None
    # App mode (instead of github_token): the App's id and its private key in PEM as GitHub issues it,
    # from the secrets folder (gradci_github_app_private_key) or a file of its own.
    github_app_id: int | None = None
    github_app_private_key: SecretStr | None = None
    github_app_private_key_file: Path | None = None
    # Public clone URL of an "owner/name" repository. Credentials are added by the worker at
    # clone time, never stored in the database.
    clone_url_template: str = "https://github.com/{full_name}.git"
    # Which repositories may run (fnmatch patterns over URL or owner/name): the registered ones. Empty
    # allows all for what only the operator can send (API token, its own webhook secret, upload
    # tokens) and none for what anyone can (App installations, OIDC id tokens); "*" opens those too.
    allowed_repos: Annotated[list[str], NoDecode] = Field(default_factory=list)

    # Jobs
    job_chunk_size: int = Field(25, ge=1)
    # Cut jobs by what an earlier run's cells cost and send them longest first (services/job_balance.py);
    # off: every job holds job_chunk_size scenarios, in the planner's stable order.
    job_balance: bool = True
    # Affected cells (docs/affected-cells.md): a run carries the cells of its base run whose inputs are
    # unchanged. Runs of the repositories matching full_run_repos (fnmatch over URL or owner/name; "*": all)
    # always run every cell, as do a pull request labelled full_run_label and a default-branch push
    # when the repository's last full default-branch run finished over full_run_every_h hours ago (0:
    # every default-branch push is full).
    full_run_repos: Annotated[list[str], NoDecode] = Field(default_factory=list)
    full_run_label: str = "full"
    full_run_every_h: float = Field(24.0, ge=0)
    # Default-branch runs keep the finite-difference references they compute, with what computing them
    # read, for later runs whose inputs are unchanged (docs/affected-cells.md#references-carried). Their
    # references then run under the rule tracer: 1.3x the push's time measured (bench/RESULTS.md). Off:
    # nothing more is kept; what is kept is still offered.
    keep_references: bool = True
    cell_timeout_s: float = Field(300.0, gt=0)
    job_soft_time_limit_s: int = Field(3300, gt=0)
    job_hard_time_limit_s: int = Field(3600, gt=0)
    max_job_attempts: int = Field(3, ge=1)

    # The runner's box (worker/sandbox.py, built by bubblewrap): the pool of fresh uids its runners
    # get when the worker is root ("first-last"), the processes of one runner's tree, its memory
    # on CPU workers (0: none), how much of its output reaches the worker's log per request, and
    # how long importing a repository's scenario modules may take. ``runner_unsandboxed``: run
    # repository code with no box where none can be built (an operator's explicit choice).
    runner_uid_range: str = Field("2100000000-2100999999", pattern=r"^\d+-\d+$")
    runner_pids_max: int = Field(256, ge=8)
    runner_unsandboxed: bool = False
    # All repositories' JAX compilation caches together (MB); the least recently used go first.
    runner_cache_max_mb: int = Field(4096, ge=0)
    runner_memory_limit_mb: int = Field(8192, ge=0)
    runner_output_limit_kb: int = Field(64, ge=0)
    # The runner's scratch folder (its HOME, TMPDIR, caches), capped: a tmpfs of this size where it
    # has namespaces, and no file past it anywhere (0: no cap).
    runner_scratch_mb: int = Field(1024, ge=0)
    scenario_import_timeout_s: float = Field(600.0, gt=0)
    # A runner whose resident memory exceeds this after a request is restarted before the next one
    # (0: never), so that a worker's memory stays bounded over long runs; on GPU workers, the share
    # of the GPU's memory its runner may take (torch's per-process fraction, XLA's memory fraction).
    runner_max_rss_mb: int = Field(3000, ge=0)
    runner_device_memory_fraction: float = Field(0.9, gt=0, le=1)
    # Each job process keeps a spare runner, started while it waits with torch and jax imported, for the
    # next pull request's checkout (WarmRunner.keep_spare): a small pull request's answer then pays no
    # cold start. Off: a runner starts when a checkout needs one (less memory and CPU while idle).
    runner_spare: bool = True

    # Workers
    # Pool processes of the control node a CPU worker starts beside its job pool (acting on webhook
    # deliveries, finalising runs, publishing to GitHub): short tasks, a few at once.
    control_concurrency: int = Field(2, ge=1)
    worker_heartbeat_s: float = Field(15.0, gt=0)
    worker_online_s: float = Field(60.0, gt=0)  # a worker is online if it beat within this window
    # Seconds a job may wait on a queue no online worker serves (GRADCI_DEVICE_WAIT); then its cells
    # are stored as skip with the reason, and the run finishes (services/db/waiting.py).
    device_wait: float = Field(3600.0, gt=0)

    # --- Uploads from a project's own CI (POST /api/uploads, services/uploads/) ---
    # An upload run finishes when its expected shards have all arrived, or this many seconds after
    # its first upload (GRADCI_UPLOAD_WAIT); a body over upload_max_bytes is refused (413).
    upload_wait: float = Field(1800.0, gt=0)
    upload_max_bytes: int = Field(64 * 1024 * 1024, gt=0)
    # GitHub Actions' OIDC id tokens: the issuer whose published keys sign them (matched exactly;
    # plain http only on loopback) and the audience they must name (None: the public URL).
    oidc_issuer: str = "https://token.actions.githubusercontent.com"
    oidc_audience: str | None = None

    # --- Reliability (worker/recovery.py, services/github/publish.py) ---
    # A queued job or run whose message is in no queue this long after it was sent is sent again.
    reconcile_grace_s: float = Field(60.0, gt=0)
    # A pending GitHub report is sent again after base · 2^(attempts-1) seconds, at most max.
    report_retry_base_s: float = Field(30.0, gt=0)
    report_retry_max_s: float = Field(3600.0, gt=0)

    @field_validator("allowed_repos", "operators", "full_run_repos", mode="before")
    @classmethod
    def _split_comma_list(cls, value: Any) -> Any:
        # "a/b, c/*" in the environment reads better than a JSON list.
        if isinstance(value, str):
            return [item.strip() for item in value.split(",") if item.strip()]
        return value

    @model_validator(mode="after")
    def _resolve_urls(self) -> Settings:
        self.workdir = self.workdir.expanduser().resolve()
        if not self.database_url:
            self.database_url = f"sqlite:///{self.workdir / EMBEDDED_DATABASE_FILE}"
        self.database_url = normalize_database_url(self.database_url).render_as_string(hide_password=False)
        if not self.broker_url:
            self.broker_url = f"sqla+sqlite:///{self.workdir / EMBEDDED_BROKER_FILE}"
        if self.job_soft_time_limit_s >= self.job_hard_time_limit_s:
            raise ValueError("job_soft_time_limit_s must be below job_hard_time_limit_s")
        return self

    @property
    def login_configured(self) -> bool:
        """People can sign in with GitHub: an OAuth client id and secret are set."""
        return bool(self.github_oauth_client_id and self.github_oauth_client_secret)

    @property
    def github_app_mode(self) -> bool:
        """gradci talks to GitHub as an App (check runs, installation tokens), not with a token."""
        return self.github_app_id is not None

    def github_app_key(self) -> str:
        """The App's private key (PEM); a ValueError saying what to set when there is none."""
        if self.github_app_private_key is not None:
            return self.github_app_private_key.get_secret_value()
        if self.github_app_private_key_file is not None:
            return self.github_app_private_key_file.read_text()
        raise ValueError("GRADCI_GITHUB_APP_ID is set but the App's private key is not: put the PEM GitHub issued "
                         "in the secret file gradci_github_app_private_key (GRADCI_SECRETS_DIR) or name its file "
                         "in GRADCI_GITHUB_APP_PRIVATE_KEY_FILE")

    @property
    def broker_visibility_timeout_s(self) -> int:
        return self.job_hard_time_limit_s + VISIBILITY_MARGIN_S

    def broker_transport_options(self) -> dict[str, Any]:
        """Celery's ``broker_transport_options`` for this broker."""
        return transport_options_for(self.broker_url, self.broker_visibility_timeout_s)

    def ensure_local_directories(self) -> None:
        """Create the folders of the SQLite files (database and embedded broker) this configuration uses.

        SQLite creates a missing file but not its folder.
        """
        for url in (self.database_url, strip_broker_scheme(self.broker_url)):
            ensure_sqlite_directory(url)


def strip_broker_scheme(broker_url: str) -> str:
    for scheme in EMBEDDED_BROKER_SCHEMES:
        if broker_url.startswith(scheme):
            return broker_url[len(scheme):]
    return broker_url


def transport_options_for(broker_url: str, visibility_timeout_s: int) -> dict[str, Any]:
    if broker_url.startswith(EMBEDDED_BROKER_SCHEMES):
        # kombu's SQLAlchemy transport passes these to create_engine: wait for SQLite's lock
        # instead of failing when the API and a worker touch the queue at the same moment.
        return {"connect_args": {"timeout": 30}}
    return {"visibility_timeout": visibility_timeout_s}


# Settings that are credentials: read from files in GRADCI_SECRETS_DIR (as Docker and systemd
# hand secrets over) rather than the environment, which /proc keeps for the process's lifetime.
SECRET_SETTINGS = ("database_url", "broker_url", "api_token", "github_token", "github_webhook_secret",
                   "github_app_private_key", "github_oauth_client_secret", "session_secret")
SECRETS_DIR_VARIABLE = "GRADCI_SECRETS_DIR"


def secret_file_name(field: str) -> str:
    """The file holding a setting in the secrets folder, as pydantic-settings looks for it."""
    return f"gradci_{field}"


def write_secrets_dir(folder: Path, values: dict[str, str]) -> None:
    """A folder only its owner can enter, one file per secret setting (mode 0600)."""
    folder.mkdir(parents=True, exist_ok=True)
    folder.chmod(0o700)
    for field, value in values.items():
        path = folder / secret_file_name(field)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(value)


@functools.lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process-wide settings: the environment, then the files of GRADCI_SECRETS_DIR when set.

    Tests override with ``get_settings.cache_clear()`` after changing the environment, or pass a
    ``Settings`` to ``create_app`` directly.
    """
    return Settings(_secrets_dir=os.environ.get(SECRETS_DIR_VARIABLE) or None)  # type: ignore[call-arg]  # pydantic-settings' init-only option, unknown to its mypy signature
