"""``gradci up --demo``: the built-in library submitted through the API like any client, and reported.

A newcomer should see a finished run soon, not after the whole library: without ``--scenarios`` the
demo is two runs, the neural-network family's first, then the other families'. The second is
submitted once the first has finished: the first run's finalisation is a task on the same queue as
the jobs, so a second run submitted earlier would hold the first one's result back until its own
jobs were done.
"""
from __future__ import annotations

import dataclasses
import time
from typing import Any

from rich.console import Console

from gradci.cli.client import EXIT_OK, GradciClient, exit_code, print_summary, progress_line
from gradci.cli.supervisor import Supervisor
from gradci.scenarios.contract.matrix import Matrix


def demo_matrices(matrix: Matrix) -> list[Matrix]:
    """The demo's runs: the one asked for when ``--scenarios`` chose; else the library in turn."""
    if matrix.scenarios is not None:
        return [matrix]
    from gradci.scenarios.library import demo_runs  # the library's families; no framework is imported

    return [dataclasses.replace(matrix, scenarios=patterns) for patterns in demo_runs()]


def run_demo(client: GradciClient, supervisor: Supervisor, console: Console,
             parts: list[Matrix]) -> list[dict[str, Any]]:
    """Submit each part (``demo_matrices``) as a run once the one before it has finished.

    Prints each one's summary and time as it finishes; returns their last states.
    """
    finished: list[dict[str, Any]] = []
    started = time.monotonic()
    with console.status("checking") as status:
        def update(run: dict[str, Any]) -> None:
            supervisor.poll()
            status.update(progress_line(run))

        for part in parts:
            created = client.submit(**part.to_mapping())
            console.print(f"demo: run {created['id']} ({', '.join(part.scenarios or ('every scenario',))}) "
                          f"submitted: {created['url']}", markup=False, highlight=False)
            run = client.wait(created["id"], on_update=update)
            print_summary(run, console)
            console.print(f"demo: run {run['id']} finished {time.monotonic() - started:.0f} s after the demo "
                          f"started", markup=False, highlight=False)
            finished.append(run)
    return finished


def demo_exit_code(runs: list[dict[str, Any]]) -> int:
    """As ``gradci check`` over all the demo's runs: the first failing run's code."""
    return next((code for code in map(exit_code, runs) if code != EXIT_OK), EXIT_OK)
