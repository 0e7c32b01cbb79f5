"""References at the speed of the check, measured side by side in one run (the machine is shared).

On the JAX scenarios of the conformance family (jax.numpy, jax.nn, jax.scipy.special, jax.lax under
every operator they take):

1. The references alone: point by point with nothing shared (as before batching) against batched
   and shared across operators, with the memo's hit rate.
2. gradci × float64, float32 (references included, computed afresh) ÷
   ``jax.test_util.check_grads(f, (x,), order, modes=("fwd", "rev"))`` on the same functions at the
   same points, in both dtypes (order 2 where a second-order operator is checked). Target ≤ 1 for
   the backends that check the same modes, ``jax-fwd`` and ``jax-rev-jit``; the three JAX backends
   (op-by-op ``jax-rev`` too) are printed beside them. Each side runs twice in fresh processes
   (imports and JAX's start not counted): cold, with an empty JAX compilation cache of its own, then
   warm, with the cache its cold run left, as a second check of unchanged code finds it.
3. ``--library``: the memo's hit rate on the built-in library (``gradci.scenarios.library.default()``).

Run: .venv/bin/python bench/references.py [--every N] [--limit N] [--parts references,cells] [--library]
(``--every 10 --parts cells``: a tenth of the functions, the cells alone, to iterate quickly.)
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import gradci
from gradci.scenarios.library import conformance as frameworks
from gradci.scenarios.operators.records import OPERATOR_RECORDS
from gradci.scenarios.reference.answer import ReferenceCache
from gradci.scenarios.reference.flat_function import ravel
from gradci.scenarios.reference.stencils import BATCHING_ENV

JAX_BACKENDS = ["jax-rev", "jax-fwd", "jax-rev-jit"]
SAME_MODES = ["jax-fwd", "jax-rev-jit"]  # what check_grads(modes=("fwd", "rev")) checks: jvp and vjp rules, jitted
DTYPES = ["float64", "float32"]
SIDES = {"gradci": SAME_MODES, "gradci-3": JAX_BACKENDS, "check_grads": None}


def jax_scenarios(every: int, limit: int | None = None) -> list:
    """The family's JAX scenarios, of every ``every``-th function (each with all its operators), the
    first ``limit`` of those functions."""
    chosen = [s for s in frameworks.scenarios() if s.implementation("jax") is not None
              and all(s.implementation(other) is None for other in ("numpy", "torch"))]
    kept = set(list(dict.fromkeys(s.name.rsplit("/", 1)[0] for s in chosen))[::every][:limit])
    return [s for s in chosen if s.name.rsplit("/", 1)[0] in kept]


def functions_at_points(chosen: list) -> list[tuple[object, int]]:
    """One (scenario, order) per distinct function and point: what check_grads is given."""
    groups: dict[tuple[str, bytes], list] = {}
    for s in chosen:
        groups.setdefault((s.function_fingerprint(), ravel(s.x)[0].tobytes()), []).append(s)
    return [(group[0], max(OPERATOR_RECORDS[s.operator].order for s in group)) for group in groups.values()]


@contextmanager
def batching(enabled: bool):
    before = os.environ.get(BATCHING_ENV)
    os.environ[BATCHING_ENV] = "on" if enabled else "off"
    try:
        yield
    finally:
        if before is None:
            del os.environ[BATCHING_ENV]
        else:
            os.environ[BATCHING_ENV] = before


def run_gradci(chosen: list, backends: list[str]) -> tuple[float, object]:
    start = time.perf_counter()
    report = gradci.check(chosen, backends=backends, devices=["cpu"], dtypes=DTYPES,
                          references=ReferenceCache())  # a fresh cache: references recomputed
    return time.perf_counter() - start, report


def run_check_grads(pairs: list) -> tuple[float, int]:
    from gradci.scenarios.adapters import get_framework

    get_framework("jax")  # x64 on, as in gradci's runs (and the same compile flags)
    import jax
    import jax.numpy as jnp
    from jax.test_util import check_grads

    failures = 0
    start = time.perf_counter()
    for s, order in pairs:
        fn = s.implementation("jax")
        for dtype in (jnp.float64, jnp.float32):
            x = jax.tree_util.tree_map(lambda leaf: jnp.asarray(leaf, dtype=dtype), s.x)
            contexts = [jax.tree_util.tree_map(lambda leaf: jnp.asarray(leaf, dtype=dtype), c) for c in s.contexts]
            try:
                check_grads(lambda x: fn(x, *contexts), (x,), order=order, modes=("fwd", "rev"))
            except Exception:  # noqa: BLE001 - counted: check_grads' own tolerances, not ours
                failures += 1
    return time.perf_counter() - start, failures


def run_references(chosen: list, batched: bool) -> tuple[float, ReferenceCache]:
    cache = ReferenceCache(share_evaluations=batched)
    with batching(batched):
        start = time.perf_counter()
        for s in chosen:
            cache.answer(s)  # a scenario without a reference answers why, timed alike
        return time.perf_counter() - start, cache


def references_before_and_after(chosen: list) -> None:
    """Measured first, in a fresh process: after a whole check in the same process the same batched
    references took 10× longer (30 s against 3 s here), the process then holding 4 GB."""
    run_references(chosen, batched=True)  # warm-up: compiles the batched functions
    looped, _ = run_references(chosen, batched=False)
    batched, cache = run_references(chosen, batched=True)
    print(f"1. references of {len(chosen)} JAX scenarios: point by point, nothing shared {looped:7.1f} s   "
          f"batched and shared {batched:7.1f} s   speed-up {looped / batched:5.1f}×   "
          f"memo hit rate {cache.memo.hit_rate:.0%}", flush=True)


def run_side(side: str, chosen: list) -> dict:
    """One side's run: seconds, and what it found (cells by status, or how many check_grads raised)."""
    if SIDES[side] is None:
        seconds, failures = run_check_grads(functions_at_points(chosen))
        return {"seconds": seconds, "found": f"{failures} raised"}
    seconds, report = run_gradci(chosen, SIDES[side])
    counts = {str(status): count for status, count in sorted(report.counts().items())}
    return {"seconds": seconds, "found": f"{len(report.cells)} cells {counts}"}


def child(side: str, every: int, limit: int | None) -> None:
    """One side's run in this fresh process: JAX started (x64 on, the compile flags set, its CPU
    client made) before the clock starts, as any check starts; compilations then come from the
    compilation cache the parent named, or are made (and stored there)."""
    from gradci.scenarios.adapters import get_framework

    get_framework("jax")
    import jax.numpy as jnp

    jnp.zeros(1).block_until_ready()
    result = run_side(side, jax_scenarios(every, limit))
    result["max_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps(result), flush=True)


def in_fresh_process(side: str, every: int, limit: int | None, cache: str) -> dict:
    command = [sys.executable, str(Path(__file__).resolve()), "--child", side, "--every", str(every)]
    command += ["--limit", str(limit)] if limit is not None else []
    done = subprocess.run(command, env={**os.environ, "GRADCI_JAX_CACHE_DIR": cache}, capture_output=True,
                          text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"the {side} run failed:\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def side_by_side(every: int, limit: int | None) -> None:
    """Each side twice, in fresh processes: cold, with an empty compilation cache of its own, then
    warm, with the cache its cold run left (what a second check of unchanged code finds)."""
    pairs = functions_at_points(jax_scenarios(every, limit))
    print(f"2. gradci ÷ check_grads(order 1|2, fwd+rev) on {len(pairs)} functions × {len(DTYPES)} dtypes; "
          f"gradci = {' + '.join(SAME_MODES)}, gradci-3 = {' + '.join(JAX_BACKENDS)}", flush=True)
    runs: dict[tuple[str, str], dict] = {}
    for side in ("check_grads", "gradci", "gradci-3"):
        with tempfile.TemporaryDirectory(prefix="gradci-bench-jax-cache-") as cache:
            for label in ("cold", "warm"):
                load = os.getloadavg()[0]
                run = runs[label, side] = in_fresh_process(side, every, limit, cache)
                theirs = runs.get((label, "check_grads"), run)["seconds"]
                ratio = "" if side == "check_grads" else f"   ÷ check_grads = {run['seconds'] / theirs:5.2f}"
                print(f"   {label} {side:12s} {run['seconds']:7.1f} s{ratio}   ({run['found']}, "
                      f"max RSS {run['max_rss_mb']:.0f} MB, load {load:.1f})", flush=True)


def library_hit_rate() -> None:
    from gradci.scenarios.library import default

    elapsed, cache = run_references(default(), batched=True)
    print(f"3. built-in library: references {elapsed:6.1f} s, memo hit rate {cache.memo.hit_rate:.0%} "
          f"({cache.memo.hits} of {cache.memo.hits + cache.memo.misses} evaluations)")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--every", type=int, default=1, help="only every N-th function, with all its operators")
    parser.add_argument("--limit", type=int, default=None, help="only the first N of those functions")
    parser.add_argument("--parts", default="references,cells", help="references, cells (comma-separated)")
    parser.add_argument("--library", action="store_true", help="also the memo's hit rate on the built-in library")
    parser.add_argument("--child", choices=sorted(SIDES), help=argparse.SUPPRESS)  # a cold run (``cold``)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.every, args.limit)
        return
    parts = set(args.parts.split(","))
    with tempfile.TemporaryDirectory(prefix="gradci-bench-jax-cache-") as cache:
        os.environ["GRADCI_JAX_CACHE_DIR"] = cache  # this process's: before jax starts, empty
        chosen = jax_scenarios(args.every, args.limit)
        operators = sorted({s.operator for s in chosen})
        print(f"{len(chosen)} JAX scenarios ({', '.join(operators)})", flush=True)
        if "references" in parts:
            references_before_and_after(chosen)
        if "cells" in parts:
            side_by_side(args.every, args.limit)
        if args.library:
            library_hit_rate()


if __name__ == "__main__":
    main()
