"""The worker's side of affected cells: each cell's record stamped and named by digest, the device a
carried cell would now run on, and the plan left without the carried groups."""
from __future__ import annotations

import os

from gradci.scenarios.affected.carry import CommitInputs, plan_carry
from gradci.scenarios.affected.environment import config
from gradci.scenarios.contract.matrix import Matrix
from gradci.services.db.models import Worker
from gradci.services.planner import JobSpec, Plan, without_groups
from gradci.worker.affected import MIXED, NO_WORKER, DependencyBuffer, device_identity, environment_for

GPU = {"device": "cuda:0", "kind": "cuda", "name": "NVIDIA H100", "capability": "90", "driver": "550.54",
       "cuda": "12.4", "memory_total": 80 << 30, "memory_free": 3 << 30, "source": "nvml",
       "frameworks": {"torch": "2.13.0", "jax": None, "jaxlib": None}, "cuda_visible_devices": "3",
       "memory_caps": {"torch_memory_fraction": 0.9}}


def worker(name: str, device: str, record: dict) -> Worker:
    return Worker(name=name, host="h", device=device, queue=device, versions={"device": record})


def test_a_device_is_known_by_what_decides_its_results_not_by_what_changes_between_starts():
    identity = device_identity(GPU)
    assert identity == {"kind": "cuda", "name": "NVIDIA H100", "capability": "90", "driver": "550.54", "cuda": "12.4",
                        "frameworks": {"torch": "2.13.0", "jax": None, "jaxlib": None}}
    restarted = {**GPU, "memory_free": 70 << 30, "cuda_visible_devices": "1", "device": "cuda:1"}
    assert device_identity(restarted) == identity
    assert device_identity({**GPU, "driver": "555.42"}) != identity


def test_a_cell_on_a_device_carries_only_when_every_worker_of_it_is_the_device_it_ran_on(tmp_path):
    same = [worker("a", "cuda:0", GPU), worker("b", "cuda:1", {**GPU, "memory_free": 1})]
    stamped = DependencyBuffer(str(tmp_path), "s" * 40, {"repeats": 1, "rule_coverage": True}, GPU).environment
    of = environment_for(str(tmp_path), {"repeats": 1}, same)
    assert of("cuda") == stamped  # rule_coverage changes no verdict: not an input
    newer_driver = environment_for(str(tmp_path), {"repeats": 1}, [*same, worker("c", "cuda:2", {**GPU, "driver": "9"})])
    assert newer_driver("cuda")["device"] == {k: str(v) for k, v in MIXED.items()}
    assert of("cpu")["device"] == {k: str(v) for k, v in NO_WORKER.items()}
    assert environment_for(str(tmp_path), {"repeats": 2}, same)("cuda") != stamped  # another option: re-run


def test_each_cell_names_its_record_by_digest_and_a_runner_cannot_claim_a_provenance(tmp_path):
    buffer = DependencyBuffer(str(tmp_path), "s" * 40, {}, {"kind": "cpu", "name": "x", "cores": 4})
    first = buffer.take({"scenario": "a", "depends": {"scenario": "f", "files": {}}, "carried": {"run": 1}})
    second = buffer.take({"scenario": "a", "dtype": "float32", "depends": {"scenario": "f", "files": {}}})
    assert "depends" not in first and "carried" not in first
    assert first["depends_digest"] == second["depends_digest"] and len(buffer.pending) == 1
    (record,) = buffer.pending.values()
    assert record["sha"] == "s" * 40 and record["environment"]["device"] == {"kind": "cpu", "name": "x"}
    assert "depends_digest" not in buffer.take({"scenario": "b", "status": "error"})  # no record: never carried
    forged = buffer.take({"scenario": "b", "carried_run_id": 9, "carried_sha": "x", "carried_reason": "trust me",
                          "depends_digest": "f" * 64})  # a runner's word on where its cell came from: dropped
    assert not {"carried_run_id", "carried_sha", "carried_reason", "depends_digest"} & forged.keys()
    library = DependencyBuffer(None, None, {}, {})
    cell = library.take({"scenario": "c", "fingerprint": "fp"})
    assert library.pending[cell["depends_digest"]]["scenario"] == "fp"  # the built-in library: its fingerprint


def test_the_plan_without_the_carried_groups_keeps_the_rest_in_order():
    jobs = (JobSpec("torch-rev", "cpu", "cpu", ("a", "b"), cost_s=2.0), JobSpec("jax-rev", "cpu", "cpu", ("a",)),
            JobSpec("torch-rev", "cuda", "cuda", ("a", "b")))
    plan = Plan(matrix=Matrix(), scenarios=(), jobs=jobs)
    left = without_groups(plan, {("a", "torch-rev", "cpu"), ("a", "jax-rev", "cpu")})
    assert left.jobs == (JobSpec("torch-rev", "cpu", "cpu", ("b",), cost_s=1.0), jobs[2])
    assert without_groups(plan, set()) is plan
    assert without_groups(plan, {(s, b, d) for job in jobs for s in job.scenarios
                                 for b, d in [(job.backend, job.device)]}).jobs == ()


def test_a_configuration_file_linked_out_of_the_checkout_is_never_read(tmp_path):
    secret = tmp_path / "secret"
    secret.write_text("hunter2")
    root = tmp_path / "checkout"
    root.mkdir()
    (root / "uv.lock").symlink_to(secret)
    (root / "requirements").symlink_to(tmp_path, target_is_directory=True)
    secret.with_name("requirements-dev.txt").write_text("x")
    os.symlink("/dev/zero", root / "poetry.lock")
    found = config(root, {})
    assert found["uv.lock"] == found["poetry.lock"] == "outside the checkout"
    assert all(value == "outside the checkout" for name, value in found.items() if name.startswith("requirements/"))


def test_an_error_in_the_base_re_runs_its_group_whatever_its_record():
    depends = {"scenario": "f", "environment": {"software": {}, "config": {}, "device": {}}}
    base = [{"scenario": "s", "backend": "b", "device": "cpu", "dtype": dtype, "status": status, "depends": depends}
            for dtype, status in (("float64", "pass"), ("float32", "error"))]
    plan = plan_carry(base, {"s": "f"}, CommitInputs(None), lambda _: depends["environment"], {"run": 1, "sha": "x"})
    assert plan.carried == [] and plan.rerun == {("s", "b", "cpu"): "its result was an error"}
