"""A CPU worker's control node (``gradci.worker.control_node``) with a real ``gradci worker`` on
PostgreSQL and Redis: it runs beside the job pool in the worker's process group and the worker's row
lists the control queue; killed, it is started again and the control tasks go on (a run's
finalisation is one); a worker killed with SIGKILL takes it along.
"""
from __future__ import annotations

import os
import signal

import pytest

from gradci._testing.processes import control_nodes_below, descendants, wait_for, wait_gone
from gradci._testing.service import Service
from gradci.services.broker.queues import CONTROL_QUEUE
from gradci.worker.control_keeper import control_node_name
from gradci.worker.start import worker_argv

pytestmark = pytest.mark.integration


def worker_rows(service: Service) -> list[dict]:
    with service.client() as client:
        return client.get("/api/workers").json()


def test_a_control_node_is_named_after_its_worker_and_the_job_pool_does_not_take_its_queue() -> None:
    assert control_node_name("cpu-123@box") == "control-cpu-123@box"
    assert "--queues=cpu" in worker_argv("cpu", ["cpu"], 2, "cpu-123@box", "INFO")


def test_the_control_node_runs_beside_the_worker_and_starts_again_when_killed(fresh_service: Service) -> None:
    worker = fresh_service.worker
    assert worker is not None
    (node,) = wait_for(lambda: control_nodes_below(worker.pid), "the worker's control node", timeout_s=60)
    assert os.getpgid(node) == os.getpgid(worker.pid)  # what stops the worker's group stops it too
    wait_for(lambda: [row["queue"] for row in worker_rows(fresh_service)] == [f"cpu,{CONTROL_QUEUE}"],
             "the worker's row listing the control queue", timeout_s=30)

    os.kill(node, signal.SIGKILL)
    (again,) = wait_for(lambda: control_nodes_below(worker.pid) - {node}, "a new control node", timeout_s=60)
    assert again != node
    # A run finishes only through finalize_run, which only a control node takes.
    run_id = fresh_service.submit(scenarios=["slow/1"])
    assert fresh_service.wait_finished(run_id)["status"] == "passed"


def test_a_worker_killed_with_sigkill_takes_its_control_node_along(fresh_service: Service) -> None:
    worker = fresh_service.worker
    assert worker is not None
    nodes = wait_for(lambda: control_nodes_below(worker.pid), "the worker's control node", timeout_s=60)
    tree = {pid for node in nodes for pid in descendants(node)}  # the node and its pool
    worker.kill()  # the worker alone, not its group: nobody is left to stop the node but the kernel
    worker.wait()
    wait_gone(tree, 15)
