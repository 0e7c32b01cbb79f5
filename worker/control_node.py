"""A CPU worker's control node: a Celery worker of its own that consumes the control queue alone.

``gradci worker --device cpu`` starts it beside its job pool (``gradci.worker.control_keeper``) as
``python -m gradci.worker.control_node --parent PID --name NAME``. Acting on webhook deliveries,
finalising runs and publishing to GitHub then never wait for a pool process that runs a job: a pull
request's pending status or check run comes within a second of its webhook however busy the job
pools are. Its own small prefork pool (GRADCI_CONTROL_CONCURRENCY processes) runs them under the
configuration every worker shares (``acks_late`` with ``reject_on_worker_lost``: at least once), and
it stops as a job node does (``gradci.worker.shutdown``: cold, unfinished messages back to the broker).

It has no runner and runs no repository code. It does not beat: its job node's row lists the
control queue while it runs. It dies with its job node (``die_with``).
"""
from __future__ import annotations

import argparse
import os
import signal

from gradci.scenarios.contract.devices import CPU
from gradci.services.broker.queues import CONTROL_QUEUE
from gradci.services.secrecy import forbid_inspection, libc
from gradci.worker import context, shutdown
from gradci.worker.celery_app import celery_argv, create_worker_app
from gradci.worker.device_discovery import LocalDevice

_PR_SET_PDEATHSIG = 1
# Its lines share the job node's log: say whose they are.
LOG_FORMAT = f"[%(asctime)s: %(levelname)s/{CONTROL_QUEUE}/%(processName)s] %(message)s"


def die_with(parent: int) -> None:
    """SIGTERM to this process from the kernel when ``parent`` (its job node) dies; gone at once if it is.

    For a job node killed with SIGKILL, which cannot stop its control node itself.
    """
    libc().prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if os.getppid() != parent:  # it died before the line above took effect
        raise SystemExit(f"control node: its worker (pid {parent}) is gone")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m gradci.worker.control_node",
                                     description="The control queue's consumer beside a CPU worker's job pool.")
    parser.add_argument("--parent", type=int, required=True, help="the job node's pid: this node dies with it")
    parser.add_argument("--name", required=True, help="its Celery node name")
    parser.add_argument("--loglevel", default="INFO")
    args = parser.parse_args(argv)
    die_with(args.parent)
    forbid_inspection()  # its environment holds the credentials, as the job node's does
    configured = context.configure(LocalDevice(CPU), name=args.name)
    app = create_worker_app(configured.settings, beats=False)
    app.conf.update(worker_log_format=LOG_FORMAT, worker_task_log_format=LOG_FORMAT)
    shutdown.install()
    app.worker_main(celery_argv(args.name, [CONTROL_QUEUE], "prefork", configured.settings.control_concurrency,
                                args.loglevel))


if __name__ == "__main__":
    main()
