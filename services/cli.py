"""The `gradci` command line."""
from __future__ import annotations

from typing import Optional

import typer

app = typer.Typer(help="gradci: derivative checks for JAX and PyTorch, as a CI service.",
                  no_args_is_help=True, add_completion=False)


@app.command()
def check(
    repo: Optional[str] = typer.Option(None, help="Repository with a gradci.toml (default: the built-in library)."),
    backends: Optional[str] = typer.Option(None, help="Comma-separated backends (default: all available)."),
    devices: Optional[str] = typer.Option(None, help="Comma-separated devices: cpu, cuda, cuda:N."),
    dtypes: Optional[str] = typer.Option(None, help="Comma-separated dtypes, e.g. float64,float32."),
    k: Optional[str] = typer.Option(None, "-k", help="Only scenarios whose name matches (glob or substring)."),
    format: str = typer.Option("table", "--format", help="table, json or junit."),
    output: Optional[str] = typer.Option(None, "-o", "--output", help="Write the report to this file."),
) -> None:
    """Check derivatives locally: exit 0 iff no cell is fail, error or xpass."""
    from services.check_command import run_check

    raise typer.Exit(run_check(repo, backends, devices, dtypes, k, format, output))


@app.callback()
def main() -> None:
    """gradci command line."""


if __name__ == "__main__":
    app()
