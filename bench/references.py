"""References at the speed of the check, measured side by side in one run (the machine is shared).

On the JAX scenarios of the conformance family (jax.numpy, jax.nn, jax.scipy.special, jax.lax under
every operator they take):

1. The references alone: point by point with nothing shared (as before batching) against batched
   and shared across operators, with the memo's hit rate.
2. gradci with the three JAX backends × float64, float32 (references included, computed afresh)
   ÷ ``jax.test_util.check_grads(f, (x,), order, modes=("fwd", "rev"))`` on the same functions at the
   same points, in both dtypes (order 2 where a second-order operator is checked). Target ≤ 1.
3. ``--library``: the memo's hit rate on the built-in library (``gradci.scenarios.library.default()``).

Both sides run once to warm up (imports, compilation) before they are timed.
Run: .venv/bin/python bench/references.py [--every N] [--library]
"""
from __future__ import annotations

import argparse
import os
import time
from contextlib import contextmanager

import gradci
from gradci.scenarios.library import conformance as frameworks
from gradci.scenarios.operators.records import OPERATOR_RECORDS
from gradci.scenarios.reference.finite_differences import ReferenceCache
from gradci.scenarios.reference.flat_function import ravel
from gradci.scenarios.reference.stencils import BATCHING_ENV

JAX_BACKENDS = ["jax-rev", "jax-fwd", "jax-rev-jit"]
DTYPES = ["float64", "float32"]


def jax_scenarios(every: int) -> list:
    """The family's JAX scenarios, of every ``every``-th function (each with all its operators)."""
    chosen = [s for s in frameworks.scenarios() if s.implementation("jax") is not None
              and all(s.implementation(other) is None for other in ("numpy", "torch"))]
    kept = set(list(dict.fromkeys(s.name.rsplit("/", 1)[0] for s in chosen))[::every])
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


def run_gradci(chosen: list) -> tuple[float, object]:
    start = time.perf_counter()
    report = gradci.check(chosen, backends=JAX_BACKENDS, devices=["cpu"], dtypes=DTYPES,
                             references=ReferenceCache())  # a fresh cache: references recomputed
    return time.perf_counter() - start, report


def run_check_grads(pairs: list) -> tuple[float, int]:
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
            try:
                cache.get(s)
            except Exception:  # noqa: BLE001 - a scenario without a reference is an error cell, timed alike
                pass
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


def side_by_side(chosen: list) -> None:
    pairs = functions_at_points(chosen)
    run_gradci(chosen), run_check_grads(pairs)  # warm-up: imports, compilation
    ours, report = run_gradci(chosen)
    theirs, failures = run_check_grads(pairs)
    counts = dict(report.counts())
    print(f"2. gradci, {len(JAX_BACKENDS)} backends × {len(DTYPES)} dtypes, {len(report.cells)} cells {counts}: "
          f"{ours:7.1f} s", flush=True)
    print(f"   check_grads(order 1|2, fwd+rev) on {len(pairs)} functions × {len(DTYPES)} dtypes "
          f"({failures} raised):   {theirs:7.1f} s   ratio {ours / theirs:5.2f}", flush=True)


def library_hit_rate() -> None:
    from gradci.scenarios.library import default

    elapsed, cache = run_references(default(), batched=True)
    print(f"3. built-in library: references {elapsed:6.1f} s, memo hit rate {cache.memo.hit_rate:.0%} "
          f"({cache.memo.hits} of {cache.memo.hits + cache.memo.misses} evaluations)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--every", type=int, default=1, help="only every N-th function, with all its operators")
    parser.add_argument("--library", action="store_true", help="also the memo's hit rate on the built-in library")
    args = parser.parse_args()
    chosen = jax_scenarios(args.every)
    operators = sorted({s.operator for s in chosen})
    print(f"{len(chosen)} JAX scenarios ({', '.join(operators)})", flush=True)
    references_before_and_after(chosen)
    side_by_side(chosen)
    if args.library:
        library_hit_rate()
