"""The ``gradci`` command line.

It is the one place that wires the engine, the server side, the worker and the dashboard together.
Each command imports what it needs when it runs, so that ``gradci submit`` and ``gradci status``
load no numpy or framework.
"""
from __future__ import annotations

import os
from typing import Annotated

import typer

from gradci.scenarios.contract.matrix import Matrix


def split_list(value: str | None) -> list[str] | None:
    """A comma-separated option as a list (None when not given)."""
    return [part.strip() for part in value.split(",") if part.strip()] or None if value else None


def matrix_of(backends: str | None = None, devices: str | None = None, dtypes: str | None = None,
              scenarios: str | None = None) -> Matrix:
    """The matrix the flags ask for: comma-separated axes, scenario patterns separated by commas."""
    return Matrix.of(backends=split_list(backends), devices=split_list(devices), dtypes=split_list(dtypes),
                     scenarios=split_list(scenarios))


SCENARIOS_HELP = ("Scenario patterns, comma-separated: a glob, or a plain word matching as a substring "
                  "(the rule of gradci.toml and the server).")

UPLOAD_PANEL = "Uploading to a gradci server"

# The matrix's axes and the cell options, where check and submit take them alike.
Devices = Annotated[str | None, typer.Option(help="Comma-separated devices: cpu, cuda, cuda:N.")]
Dtypes = Annotated[str | None, typer.Option(help="Comma-separated dtypes, e.g. float64,float32.")]
Timings = Annotated[bool | None, typer.Option("--timings/--no-timings",
                                              help="Time each cell's steady state over repeated calls (default: "
                                                   "gradci.toml's \\[check] timings, else one call: see the docs).")]

app = typer.Typer(help="gradci: derivative checks for JAX and PyTorch, as a CI service.",
                  no_args_is_help=True, add_completion=False)
tokens_app = typer.Typer(help="Upload tokens: which repository's results `gradci check --upload` may send; "
                              "read tokens (--read): which repositories' runs a program may read. "
                              "Run with the server's settings (the folder of `gradci up`, or GRADCI_DATABASE_URL).",
                         no_args_is_help=True)
app.add_typer(tokens_app, name="tokens")
repos_app = typer.Typer(help="Registered repositories: those whose GitHub App installation may run pull requests "
                             "and whose CI may upload with an OIDC id token (besides GRADCI_ALLOWED_REPOS). "
                             "Run with the server's settings (the folder of `gradci up`, or GRADCI_DATABASE_URL).",
                        no_args_is_help=True)
app.add_typer(repos_app, name="repos")


@app.command()
def check(
    repo: str | None = typer.Option(None, help="Repository with a gradci.toml (default: the built-in library)."),
    backends: str | None = typer.Option(None, help="Comma-separated backends (default: every available one but "
                                                       "the opt-in jax-rev)."),
    devices: Devices = None,
    dtypes: Dtypes = None,
    k: str | None = typer.Option(None, "-k", help=SCENARIOS_HELP),
    format: str = typer.Option("table", "--format", help="table, json or junit."),
    output: str | None = typer.Option(None, "-o", "--output", help="Write the report to this file."),
    cell_timeout: float | None = typer.Option(None, "--cell-timeout", metavar="SECONDS",
                                                 help="Per-cell timeout (default: gradci.toml's \\[check] "
                                                      "cell_timeout_s, else 300)."),
    family: str | None = typer.Option(None, help="Only this family of the built-in library (e.g. elementary)."),
    verbose: bool = typer.Option(False, "-v", "--verbose", help="Also list the warnings each cell raised."),
    jobs: int | None = typer.Option(None, "-j", "--jobs", metavar="N",
                                    help="Sandboxed runners checking at once (default: the usable cores, bounded "
                                         "by memory). Scenarios of one function share a runner."),
    repeats: int | None = typer.Option(None, "--repeats", metavar="N",
                                          help="Compute each derivative N times and report whether the results "
                                               "are bitwise reproducible (default: each scenario's repeats)."),
    timings: Timings = None,
    rules: bool = typer.Option(True, "--rules/--no-rules",
                               help="Record which of the repository's derivative rules (autograd.Function, "
                                    "custom_vjp, custom_jvp, jax.lax's custom_linear_solve and custom_root) each cell "
                                    "ran, and print which no cell reached."),
    cov_report: str | None = typer.Option(None, "--cov-report", metavar="PATH",
                                          help="Write the repository lines the cells ran as Cobertura XML "
                                               "(PATH.xml) or LCOV (PATH.info, PATH.lcov)."),
    power: bool = typer.Option(False, "--power",
                               help="Detection power: re-run the cells that reached each rule with errors "
                                    "planted in it (an output scaled by 1 + δ, δ = 1e-1 … 1e-8, a sign flipped, "
                                    "a term dropped, a transpose) and print the smallest δ each cell caught "
                                    "and what no cell catches. Costly: several re-runs per rule output."),
    base: str | None = typer.Option(None, "--base", metavar="PATH",
                                    help="A previous check's JSON (--format json): its cells whose inputs are "
                                         "unchanged (the code they ran, the data they read, gradci.toml, the "
                                         "lockfiles, the installed versions, the device) are carried, the rest "
                                         "run."),
    run_all: bool = typer.Option(False, "--all", help="Run every cell, even with --base."),
    upload: str | None = typer.Option(None, "--upload", metavar="URL",
                                      help="Also send the cells to the gradci server at URL (its base URL), "
                                           "as one shard of the commit's run; credential: GRADCI_UPLOAD_TOKEN, "
                                           "else GitHub Actions' OIDC id token.", rich_help_panel=UPLOAD_PANEL),
    shard: str | None = typer.Option(None, "--shard", metavar="NAME", rich_help_panel=UPLOAD_PANEL,
                                     help="This upload's name among the commit's shards (default: 'default')."),
    expect_shards: str | None = typer.Option(None, "--expect-shards", metavar="A,B", rich_help_panel=UPLOAD_PANEL,
                                             help="Every shard the run waits for (default: gradci.toml's "
                                                  "\\[upload] shards, else this one alone)."),
    repository: str | None = typer.Option(None, "--repository", metavar="OWNER/NAME", rich_help_panel=UPLOAD_PANEL,
                                          help="Default: GITHUB_REPOSITORY."),
    sha: str | None = typer.Option(None, "--sha", rich_help_panel=UPLOAD_PANEL,
                                   help="The commit checked (default: the pull request's head, else GITHUB_SHA)."),
    branch: str | None = typer.Option(None, "--branch", rich_help_panel=UPLOAD_PANEL,
                                      help="Default: the pull request's head branch, else GITHUB_REF's."),
    pr: int | None = typer.Option(None, "--pr", min=1, rich_help_panel=UPLOAD_PANEL,
                                  help="The pull request (default: from GITHUB_EVENT_PATH or GITHUB_REF)."),
    base_sha: str | None = typer.Option(None, "--base-sha", rich_help_panel=UPLOAD_PANEL,
                                        help="The commit to compare with (default: the pull request's base)."),
) -> None:
    """Check derivatives locally, each scenario in a sandboxed runner.

    Exit 0 iff no cell is fail, error or xpass and some cell was checked (not every one skipped).
    With cpu and cuda devices, CPU–GPU agreement cells (cuda:N-vs-cpu) come too.
    With --upload, the cells also go to a gradci server (exit 2 when it refuses them).
    With --repo, a rule no cell reached fails the check too (gradci.toml's \\[rules] unexercised).
    --power adds information only: it never changes a cell's verdict nor the exit code.
    """
    from gradci.cli.check import run_check
    from gradci.cli.upload import UploadOptions

    upload_to = None if upload is None else UploadOptions(
        url=upload, shard=shard, expect_shards=split_list(expect_shards), repository=repository, sha=sha,
        branch=branch, pr=pr, base_sha=base_sha)
    raise typer.Exit(run_check(repo, matrix_of(backends, devices, dtypes, k), format, output,
                               cell_timeout_s=cell_timeout, family=family, verbose=verbose, repeats=repeats,
                               parallel=jobs, upload_to=upload_to, timings=timings, rules=rules,
                               cov_report=cov_report, power=power, base=base, run_all=run_all))


@app.command()
def migrate() -> None:
    """Create or upgrade the database schema (GRADCI_DATABASE_URL; default .gradci/gradci.db)."""
    from gradci.services.db.migrate import upgrade
    from gradci.services.settings import get_settings

    settings = get_settings()
    settings.ensure_local_directories()
    upgrade(settings.database_url)
    typer.echo("database is up to date")


@app.command()
def worker(
    device: str = typer.Option("cpu", help="cpu or cuda:N: the device whose queue this worker consumes."),
    concurrency: int | None = typer.Option(None, min=1, help="Jobs at once (default: CPU cores up to 4; 1 per GPU)."),
    loglevel: str = typer.Option("INFO", help="Celery log level."),
    unsandboxed: bool = typer.Option(False, "--unsandboxed",
                                     help="Where no runner box can be built (no bubblewrap, no user namespaces), "
                                          "run repository code anyway, with NO isolation: only for code you trust. "
                                          "Without it such a worker refuses repository code."),
) -> None:
    """Run a worker: checks the jobs of its device's queue and heartbeats into the workers table."""
    from gradci.worker.start import start_worker

    if unsandboxed:  # a setting like any other (GRADCI_RUNNER_UNSANDBOXED), so the workers page shows it
        os.environ["GRADCI_RUNNER_UNSANDBOXED"] = "true"
    try:
        start_worker(device, concurrency, loglevel)
    except ValueError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None


@app.command()
def devices(as_json: bool = typer.Option(False, "--json", help="JSON instead of a table.")) -> None:
    """Show this machine's devices and the devices torch and jax see.

    For the CPU and each GPU: model, capability, memory, driver, CUDA.
    GRADCI_DEVICE_INVENTORY=file.json replaces the GPUs with simulated ones.
    """
    from gradci.cli.device_listing import show_devices

    raise typer.Exit(show_devices(as_json))


@app.command()
def api(
    host: str = typer.Option("127.0.0.1", help="Interface to listen on (0.0.0.0 in a container)."),
    port: int = typer.Option(8000, help="Port."),
    workers: int = typer.Option(1, min=1, help="Processes serving requests (uvicorn's --workers): about one per "
                                               "core; on 2 cores, 2 took webhooks at 100/s within 100 ms (p99)."),
    no_auth: bool = typer.Option(False, "--no-auth", help="Serve without GRADCI_API_TOKEN: every write open to "
                                                          "whoever reaches it, so on a loopback address only."),
) -> None:
    """Serve the REST API (and the dashboard) with uvicorn.

    Refuses to start without an API token unless --no-auth is given.
    """
    from gradci.cli.serve import serve_api

    raise typer.Exit(serve_api(host, port, workers, no_auth))


@app.command()
def up(
    demo: bool = typer.Option(False, "--demo", help="Submit the built-in suite and report on it."),
    exit_: bool = typer.Option(False, "--exit", help="With --demo: stop when the run ends, exit code as gradci check."),
    port: int = typer.Option(8000, help="API port on 127.0.0.1."),
    backends: str | None = typer.Option(None, help="Demo: comma-separated backends (default: all)."),
    dtypes: str | None = typer.Option(None, help="Demo: comma-separated dtypes."),
    scenarios: str | None = typer.Option(None, help="Demo: " + SCENARIOS_HELP),
    public_read: bool = typer.Option(False, "--public-read", help="On an address other than loopback "
                                     "(GRADCI_API_HOST): show every run to anyone who reaches it, without sign-in."),
) -> None:
    """Run everything on this machine: migrations, the API and one supervised worker per device.

    On loopback its user sees everything; elsewhere it needs sign-in configured, or --public-read.
    """
    from gradci.cli.serve import up as serve_up

    matrix = matrix_of(backends=backends, dtypes=dtypes, scenarios=scenarios)
    raise typer.Exit(serve_up(port=port, demo=demo, exit_after=exit_, matrix=matrix, public_read=public_read))


@app.command()
def submit(
    server: str | None = typer.Option(None, help="Server URL (default: GRADCI_PUBLIC_URL or 127.0.0.1:8000)."),
    repo: str | None = typer.Option(None, help="git URL, path on the server's machine, or owner/name; "
                                                  "default: the built-in library."),
    sha: str | None = typer.Option(None, help="Commit to check."),
    ref: str | None = typer.Option(None, help="Branch or tag to check (when no sha)."),
    backends: str | None = typer.Option(None, help="Comma-separated backends."),
    devices: Devices = None,
    dtypes: Dtypes = None,
    scenarios: str | None = typer.Option(None, help=SCENARIOS_HELP),
    repeats: int | None = typer.Option(None, "--repeats", metavar="N", min=1, max=100,
                                          help="Compute each derivative N times and record whether the results "
                                               "are bitwise reproducible (default: gradci.toml's, each scenario's)."),
    timings: Timings = None,
    wait: bool = typer.Option(False, "--wait", help="Wait for the run; exit code as gradci check."),
) -> None:
    """Submit a run to a gradci server."""
    from gradci.cli.submit import submit as submit_run

    raise typer.Exit(submit_run(server=server, repo=repo, sha=sha, ref=ref, wait=wait, repeats=repeats,
                                timings=timings, matrix=matrix_of(backends, devices, dtypes, scenarios)))


@app.command()
def status(
    run: int = typer.Argument(..., help="Run id."),
    server: str | None = typer.Option(None, help="Server URL (default: GRADCI_PUBLIC_URL or 127.0.0.1:8000)."),
) -> None:
    """Show a run's status, counts and coverage, and why any of its jobs waits for a device."""
    from gradci.cli.submit import status as run_status

    raise typer.Exit(run_status(run, server=server))


ReadFlag = Annotated[bool, typer.Option("--read", help="Read tokens (what a program or a private repository's "
                                                     "badge may read) instead of upload tokens.")]


@tokens_app.command("create")
def tokens_create(repositories: Annotated[list[str], typer.Argument(
                      metavar="OWNER/NAME...", help="The GitHub repository (with --read: one or more).")],
                  read: ReadFlag = False) -> None:
    """Make an upload token for one repository, or a read token (--read), and print it once.

    With --read it is a read token of the repositories.
    It is printed alone on the last line (only its hash is stored).
    """
    from gradci.cli.tokens import create

    if not read and len(repositories) != 1:
        raise typer.BadParameter("an upload token uploads for one repository", param_hint="OWNER/NAME")
    raise typer.Exit(create(repositories, read=read))


@tokens_app.command("list")
def tokens_list(read: ReadFlag = False) -> None:
    """List the upload tokens (with --read: the read tokens).

    For each: id, repository, first characters, when made, last used and revoked.
    """
    from gradci.cli.tokens import show

    raise typer.Exit(show(read=read))


@tokens_app.command("revoke")
def tokens_revoke(token_id: int = typer.Argument(..., metavar="ID", help="The id gradci tokens list shows."),
                  read: ReadFlag = False) -> None:
    """Revoke an upload token (with --read: a read token): it is refused from now on."""
    from gradci.cli.tokens import revoke

    raise typer.Exit(revoke(token_id, read=read))


FullNames = Annotated[list[str], typer.Argument(metavar="OWNER/NAME...", help="GitHub repositories.")]


@repos_app.command("add")
def repos_add(repositories: FullNames) -> None:
    """Register repositories: their App installation's pull requests run, their CI's id tokens upload."""
    from gradci.cli.repos import add

    raise typer.Exit(add(repositories))


@repos_app.command("remove")
def repos_remove(repositories: FullNames) -> None:
    """Forget registered repositories: nothing of theirs runs or uploads by id token any more."""
    from gradci.cli.repos import remove

    raise typer.Exit(remove(repositories))


@repos_app.command("power")
def repos_power(state: Annotated[str, typer.Argument(metavar="on|off", help="Turn it on or off.")],
                repositories: FullNames) -> None:
    """Measure detection power on each push to the repositories' default branch (never on pull requests).

    It re-runs the cells that reach a derivative rule with errors planted in the rule; the pull requests'
    reports then say which planted errors no cell catches.
    """
    from gradci.cli.repos import power

    raise typer.Exit(power(state, repositories))


@repos_app.command("list")
def repos_list() -> None:
    """The registered repositories, and GRADCI_ALLOWED_REPOS's patterns."""
    from gradci.cli.repos import show

    raise typer.Exit(show())


@app.callback()
def main() -> None:
    """gradci command line."""


if __name__ == "__main__":
    app()
