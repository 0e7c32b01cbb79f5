"""``gradci worker --device cpu|cuda:N``: a Celery worker consuming its device's queues.

CPU workers use the prefork pool, and start a control node beside it for the control queue
(``gradci.worker.control_keeper``): webhook deliveries, finalisations and reports to GitHub never
wait for a pool process busy with a job. A GPU worker serves one GPU, one job at a time, in a solo
pool, pinned to it (CUDA_VISIBLE_DEVICES) with everything it starts, so that no process is ever
forked after CUDA could have been initialised. CUDA lives only in the runner subprocesses anyway:
the worker itself never imports a framework.
"""
from __future__ import annotations

import os
import socket

from gradci.scenarios.contract.devices import CPU
from gradci.services.broker.queues import CONTROL_QUEUE
from gradci.services.secrecy import forbid_inspection
from gradci.worker import context, shutdown
from gradci.worker.celery_app import celery_argv, create_worker_app
from gradci.worker.control_keeper import ControlKeeper, control_node_argv
from gradci.worker.device_discovery import parse_worker_device

DEFAULT_MAX_CPU_CONCURRENCY = 4  # each pool process keeps a runner with jax and torch loaded


def worker_argv(device: str, queues: list[str], concurrency: int, name: str, loglevel: str) -> list[str]:
    if device == CPU:
        pool = "prefork"
    else:
        pool = "solo" if concurrency == 1 else "threads"
    return celery_argv(name, queues, pool, concurrency, loglevel)


def default_concurrency(device: str) -> int:
    if device != CPU:
        return 1
    return max(1, min(os.cpu_count() or 1, DEFAULT_MAX_CPU_CONCURRENCY))


def start_worker(device: str, concurrency: int | None = None, loglevel: str = "INFO", name: str | None = None) -> None:
    """Run a worker in this process until it is stopped.

    SIGTERM and SIGINT stop it within seconds (see ``gradci.worker.shutdown``): the jobs it was running
    go back to the broker for the next worker. A CPU worker's control node runs as long as it does.
    """
    forbid_inspection()  # its environment holds the credentials; its pool processes inherit this
    local = parse_worker_device(device)
    if local.index is not None and (concurrency or 1) != 1:
        raise ValueError(f"a GPU worker runs one job at a time (--concurrency 1), not {concurrency}: "
                         f"its runner holds the GPU's memory; start one worker per GPU")
    name = name or f"{local.name.replace(':', '')}-{os.getpid()}@{socket.gethostname()}"
    concurrency = concurrency or default_concurrency(local.name)
    configured = context.configure(local, name=name, concurrency=concurrency)
    control = ControlKeeper(control_node_argv(name, loglevel)) if local.name == CPU else None

    def served() -> list[str]:  # what its heartbeat says it serves: the control queue while its node runs
        return local.queues + ([CONTROL_QUEUE] if control is not None and control.running() else [])

    app = create_worker_app(configured.settings, served)
    shutdown.install()
    argv = worker_argv(local.name, local.queues, concurrency, name, loglevel)
    if control is not None:
        control.start()
    try:
        app.worker_main(argv)
    finally:
        if control is not None:
            control.stop()
