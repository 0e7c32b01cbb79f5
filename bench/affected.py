"""A pull request's verdict with affected cells only (issue 32, item 5): webhook → final check run.

A real service (PostgreSQL, Redis, one worker of concurrency 2 on the CPU, App mode, a fake GitHub
on loopback) checks a repository (``--project``): a push of its default branch first (the base run,
full), then, side by side in one run of this script, three pull requests:

(a) one rule changed, labelled ``full``: every cell runs;
(b') the same change without the label, on (a)'s commit, right after it: the cells that ran the
    rule re-run, the rest are carried from the base run. The worker's runners are warm from (a)
    (its checkout, the frameworks' imports, the references): a lower bound, and what this bench
    timed as (b) until 2026-12-04;
(b) the same change on a commit of its own, new to the worker as a pull request's push is: a fresh
    checkout and no runner of it. Each pool process that ran a pull request keeps a spare runner,
    started while it waits, the frameworks imported (the production default, ``runner_spare``):
    the plan's listing and the job take one each. With ``--no-spare`` each starts cold (the box,
    the frameworks' import, the listing). Then the same cells re-run and the same carried;
(c) a change of the README only: every cell carried.

The projects:

- ``torchdiffeq`` (default): a copy of torchdiffeq's repository (``bench.affected_project``) with 56
  scenarios that mirror its own gradient tests (odeint with each solver on its test problems,
  odeint_adjoint, odeint_event), 112 cells: about what the library's own suite checks. The rule
  (``--rule``) is ``event`` (the default): ImplicitFnGradientRerouting's backward, which the 4 event
  scenarios' 8 cells run, or ``adjoint``: the adjoint method's backward, the 17 adjoint scenarios'
  34 cells;
- ``conformance``: the framework conformance family, 604 scenarios of torch and jax functions under
  every default backend, as a repository of its own (``bench.conformance_project``); the rule is
  the transpose solve it hands to ``jax.lax.custom_linear_solve``.

Each is timed from the webhook's POST to the completed check run on the fake GitHub. Goals (issue 32):
(b) ≤ 0.1 × (a), (c) ≤ 5 s on 2 cores. Rounds alternate nothing (each pull request is its own commit):
the machine is shared, so the load average is printed beside the figures.

Run: .venv/bin/python -m bench.affected [--project torchdiffeq|conformance] [--rule event|adjoint] [--rounds N]
     [--no-spare]
"""
from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any

FULL_NAME = "Codertocat/Hello-World"
APP_ID, INSTALLATION = 31337, 4242
RUN_TIMEOUT_S = 1800
PROJECTS = {  # name: (its module, what the summary line says it is)
    "torchdiffeq": ("bench.affected_project",
                    "torchdiffeq copy, 56 scenarios (its gradient tests) × 2 dtypes on torch-rev"),
    "conformance": ("bench.conformance_project",
                    "conformance family copy, 604 scenarios × every default backend × 2 dtypes"),
}


def project_module(name: str) -> ModuleType:
    import importlib

    return importlib.import_module(PROJECTS[name][0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=1, help="pull requests of each kind (default 1)")
    parser.add_argument("--project", choices=sorted(PROJECTS), default="torchdiffeq",
                        help="the repository checked (default torchdiffeq)")
    parser.add_argument("--rule", choices=("event", "adjoint"), default=None,
                        help="torchdiffeq only: the backward a pull request edits, event (the default: 8 cells) "
                             "or adjoint (34 cells)")
    parser.add_argument("--no-spare", action="store_true",
                        help="no spare runners: each pull request's runner starts cold")
    args = parser.parse_args()
    project = project_module(args.project)
    if args.rule and args.project != "torchdiffeq":
        parser.error("--rule picks one of the torchdiffeq copy's rules")
    edit = {"rule": args.rule or "event"} if args.project == "torchdiffeq" else {}
    from gradci._testing.databases import POSTGRES_ADMIN_URL, claimed_redis_database, scratch_database
    from tests.support.fake_github import FakeGitHub

    workdir = Path(tempfile.mkdtemp(prefix="gradci-bench-affected-"))
    mirrors = workdir / "mirrors"
    repo = mirrors / "Codertocat" / "Hello-World.git"
    base = project.make_repository(repo)
    heads = []
    for number in range(args.rounds):  # each pull request on a branch of its own, as the mirror serves it
        _git(repo, "checkout", "-q", "-b", f"full-{number}", base)
        full = project.change_one_rule(repo, f"{number}, full", **edit)
        _git(repo, "checkout", "-q", "-b", f"rule-{number}", base)
        rule = project.change_one_rule(repo, number, **edit)
        _git(repo, "checkout", "-q", "-b", f"docs-{number}", base)
        docs = project.change_docs(repo, number)
        heads.append((full, rule, docs))
    _git(repo, "checkout", "-q", "main")
    with FakeGitHub() as fake, scratch_database(POSTGRES_ADMIN_URL, "gradci_bench_affected") as database, \
            claimed_redis_database() as broker:
        figures = _measure(fake, database, broker, workdir, mirrors, base, heads, spare=not args.no_spare)
    spares = "no spare runners" if args.no_spare else "spare runners"
    edited = f", rule {edit['rule']}" if edit else ""
    print(f"{PROJECTS[args.project][1]}{edited}, one worker of concurrency 2, {spares}; "
          f"load average {os.getloadavg()[0]:.1f} "
          f"(at the start {figures['load']:.1f})")
    print(f"base push (full, cold runner): {figures['base']:.1f} s")
    for number, (full, rule, warm, docs, carried) in enumerate(figures["rounds"], 1):
        print(f"round {number}: (a) full {full:.1f} s, (b') one rule on (a)'s commit, warm {warm:.1f} s = "
              f"{warm / full:.2f} × (a), (b) one rule, own commit {rule:.1f} s = {rule / full:.2f} × (a) [{carried}], "
              f"(c) docs only {docs:.1f} s")
    print(f"logs: {workdir / 'logs'}")


def _measure(fake: Any, database: str, broker: str, workdir: Path, mirrors: Path, base: str,
             heads: list[tuple[str, str, str]], *, spare: bool) -> dict[str, Any]:
    from gradci._testing.service import running_service
    from tests.support.payloads import payload, pull_request
    from tests.support.webhook_client import SECRET, deliver_over_http

    key = workdir / "app.pem"
    key.write_text(fake.as_app(APP_ID, {INSTALLATION: {FULL_NAME}}))
    key.chmod(0o600)
    settings = dict(github_webhook_secret=SECRET, github_api_url=fake.url, worker_heartbeat_s="1",
                    allowed_repos=FULL_NAME, clone_url_template=f"file://{mirrors}/{{full_name}}.git",
                    github_app_id=str(APP_ID), github_app_private_key_file=str(key),
                    runner_spare=str(spare).lower())

    def deliver(event: str, body: dict, sha: str) -> float:
        """Seconds from the webhook to the completed check run of ``sha``."""
        body = {**body, "installation": {"id": INSTALLATION}}
        known = {run["id"] for run in fake.check_runs_for(sha)}  # two pull requests may share a head
        start = time.perf_counter()
        sent = deliver_over_http(service.url, event, body, None, SECRET)
        assert sent.status_code == 202, sent.text
        while not any(run.get("status") == "completed" and run["id"] not in known for run in fake.check_runs_for(sha)):
            if time.perf_counter() - start > RUN_TIMEOUT_S:
                raise RuntimeError(f"no completed check run for {sha[:7]} after {RUN_TIMEOUT_S} s; "
                                   f"see {workdir / 'logs'}")
            time.sleep(0.02)
        return time.perf_counter() - start

    def pull(number: int, head: str, labels: tuple[str, ...] = ()) -> float:
        body = pull_request("opened", head, base)
        body["number"] = body["pull_request"]["number"] = number
        body["pull_request"]["labels"] = [{"name": name} for name in labels]
        return deliver("pull_request", body, head)

    figures: dict[str, Any] = {"rounds": [], "load": os.getloadavg()[0]}
    with running_service(database, broker, workdir / "work", workdir / "logs", concurrency=2, **settings) as service:
        push = payload("push")
        push.update(ref="refs/heads/master", after=base, deleted=False)
        push["repository"]["default_branch"] = "master"
        figures["base"] = deliver("push", push, base)
        print(f"base push: {figures['base']:.1f} s (load average {os.getloadavg()[0]:.1f})", flush=True)
        for number, (full_head, rule, docs) in enumerate(heads):
            full = pull(10 + 4 * number, full_head, ("full",))
            print(f"(a) full: {full:.1f} s (load average {os.getloadavg()[0]:.1f})", flush=True)
            warm = pull(11 + 4 * number, full_head)
            print(f"(b') one rule on (a)'s commit, warm: {warm:.1f} s [{_carried(service, full_head)}] "
                  f"(load average {os.getloadavg()[0]:.1f})", flush=True)
            affected = pull(12 + 4 * number, rule)
            carried = _carried(service, rule)
            print(f"(b) one rule, its own commit: {affected:.1f} s [{carried}] "
                  f"(load average {os.getloadavg()[0]:.1f})", flush=True)
            only_docs = pull(13 + 4 * number, docs)
            print(f"(c) docs only: {only_docs:.1f} s (load average {os.getloadavg()[0]:.1f})", flush=True)
            figures["rounds"].append((full, affected, warm, only_docs, carried))
    return figures


def _carried(service: Any, sha: str) -> str:
    """What the latest run of ``sha`` carried, as its plan summed it up (``Run.carry``)."""
    with service.client() as client:
        run = max(client.get("/api/runs", params={"sha": sha}).json()["items"], key=lambda item: item["id"])
        carry = client.get(f"/api/runs/{run['id']}").json().get("carry") or {}
    return f"{carry.get('carried', 0)} cells carried, {carry.get('rerun', 0)} groups re-run"


def _git(repo: Path, *args: str) -> str:
    import subprocess

    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


if __name__ == "__main__":
    main()
