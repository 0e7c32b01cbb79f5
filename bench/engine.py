"""Engine benchmarks, printed as ratios measured side by side in one run (the machine is shared).

1. Steady-state cell time ÷ the bare framework call it wraps (target ≤ 1.10).
2. Reference + check for an MLP of ~100k parameters ÷ torch.autograd.gradcheck(fast_mode=True) on the
   same function, same point, float64, cpu, both warmed up (target ≤ 0.5). Each round times one of
   each, back to back after a pause that lets the thread pools the last call left spinning go idle;
   the figure is the median of the rounds' ratios, so that the shared machine's load, which moves
   both, cancels (the interquartile range of the ratios beside it). Where
   ``check`` takes ``timings`` (steady-state timing repeats), with and without them; and once more
   with torch on one thread, where neither side waits for the other core.

Run: .venv/bin/python bench/engine.py
"""
from __future__ import annotations

import inspect
import statistics
import time

import gradci
from gradci.scenarios.check import resolve_backends
from gradci.scenarios.library.nn import mlp_100k
from gradci.scenarios.reference.answer import ReferenceCache

ROUNDS, CALLS = 7, 50


def median_time(fn, calls: int = CALLS) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls


def interleaved(a, b, rounds: int = ROUNDS) -> tuple[float, float]:
    """Alternate a and b so drift on a noisy machine hits both alike; medians of per-round means."""
    a(), b()
    ta, tb = [], []
    for _ in range(rounds):
        ta.append(median_time(a))
        tb.append(median_time(b))
    return statistics.median(ta), statistics.median(tb)


def bare_calls(scenario):
    """The framework call a user would write, per backend, on the same inputs."""
    import jax
    import torch

    params, contexts = scenario.x, scenario.contexts
    t_params = {k: torch.tensor(v, requires_grad=True) for k, v in params.items()}
    t_ctx = [torch.tensor(c) for c in contexts]
    torch_loss = scenario.f["torch"]
    j_params = jax.tree_util.tree_map(jax.numpy.asarray, params)
    j_ctx = [jax.numpy.asarray(c) for c in contexts]
    jax_loss = scenario.f["jax"]
    jitted = jax.jit(jax.grad(jax_loss))
    leaves = list(t_params.values())
    f_params = {k: v.detach() for k, v in t_params.items()}
    func_grad = torch.func.grad(torch_loss)
    return {
        "torch-rev": lambda: torch.autograd.grad(torch_loss(t_params, *t_ctx), leaves),
        "torch-func-rev": lambda: func_grad(f_params, *t_ctx),
        "jax-rev-jit": lambda: jax.block_until_ready(jitted(j_params, *j_ctx)),
    }


def overhead(scenario) -> None:
    print(f"1. steady-state cell time ÷ bare framework call ({scenario.name}, float64, cpu)")
    bare = bare_calls(scenario)
    for name, backend in ((b.name, b) for b in resolve_backends(list(bare))):
        prepared = backend.prepare(scenario, None, "cpu", "float64")
        cell_t, bare_t = interleaved(prepared.call, bare[name])
        print(f"   {name:15s} cell {cell_t * 1e6:9.1f} µs   bare {bare_t * 1e6:9.1f} µs   ratio {cell_t / bare_t:5.2f}")


PAIRS = 21
# A pause before each timed call: the thread pools a call leaves spinning (torch's OpenMP workers,
# numpy's OpenBLAS ones: ~0.1 s after a BLAS call) would otherwise take a core from the next call, of
# the other side; each side still pays for what its own pools do within its call.
SETTLE_S = 0.15


def against_gradcheck(scenario) -> None:
    import torch

    n = sum(v.size for v in scenario.x.values())
    print(f"2. reference + check ÷ gradcheck(fast_mode=True), MLP with {n} parameters, float64, cpu")
    names = list(scenario.x)
    loss = scenario.f["torch"]
    ctx = [torch.tensor(c) for c in scenario.contexts]

    def gradcheck():
        leaves = tuple(torch.tensor(scenario.x[k], requires_grad=True) for k in names)
        assert torch.autograd.gradcheck(lambda *ls: loss(dict(zip(names, ls)), *ctx), leaves, fast_mode=True)

    def ours_check(**options):
        report = gradci.check([scenario], backends=["torch-rev"], devices=["cpu"], dtypes=["float64"],
                              references=ReferenceCache(), **options)  # a fresh cache: the reference is recomputed
        assert report.ok, report.failing()

    variants = {"": {}}
    if "timings" in inspect.signature(gradci.check).parameters:
        variants = {"(one call)": {"timings": False}, "(timings=True: 1 + 3 calls)": {"timings": True}}
    threads = torch.get_num_threads()
    for threads_now in (threads, 1):
        torch.set_num_threads(threads_now)
        for label, options in variants.items():
            paired(lambda options=options: ours_check(**options), gradcheck, f"torch threads {threads_now} {label}")
    torch.set_num_threads(threads)


def paired(ours, theirs, label: str, pairs: int = PAIRS) -> None:
    """Both warmed up, then ``pairs`` rounds of one of each, back to back; the median ratio of rounds."""
    ours(), theirs(), ours(), theirs()  # imports and first-use costs out of the measurement
    o, t = [], []
    for _ in range(pairs):
        for fn, times in ((ours, o), (theirs, t)):
            time.sleep(SETTLE_S)
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
    ratios = sorted(a / b for a, b in zip(o, t))
    quarter = len(ratios) // 4
    print(f"   {label:40s} gradci {statistics.median(o) * 1e3:7.1f} ms   gradcheck {statistics.median(t) * 1e3:7.1f} ms"
          f"   ratio {statistics.median(ratios):5.2f} (IQR {ratios[quarter]:.2f}–{ratios[-quarter - 1]:.2f})")


if __name__ == "__main__":
    big = mlp_100k()
    from gradci.scenarios.library import default

    small = next(s for s in default() if s.name.startswith("nn/chain") and s.operator == "gradient")
    overhead(small)
    overhead(big)
    against_gradcheck(big)
