"""Engine benchmarks, printed as ratios measured side by side in one run (the machine is shared).

1. Steady-state cell time ÷ the bare framework call it wraps (target ≤ 1.10).
2. Reference + check for an MLP of ~100k parameters ÷ torch.autograd.gradcheck(fast_mode=True) on the
   same function (target < 1).

Run: .venv/bin/python bench/engine.py
"""
from __future__ import annotations

import statistics
import time

import gradci
from gradci.scenarios.library.nn import mlp_100k
from gradci.scenarios.reference.finite_differences import ReferenceCache
from gradci.scenarios.verdict.check import resolve_backends

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

    def ours_check():
        report = gradci.check([scenario], backends=["torch-rev"], devices=["cpu"], dtypes=["float64"],
                                 references=ReferenceCache())  # a fresh cache: the reference is recomputed
        assert report.ok, report.failing()

    ours, theirs = [], []
    ours_check(), gradcheck()  # imports and first-use costs out of the measurement
    for _ in range(9):
        start = time.perf_counter(); ours_check(); ours.append(time.perf_counter() - start)  # noqa: E702
        start = time.perf_counter(); gradcheck(); theirs.append(time.perf_counter() - start)  # noqa: E702
    o, t = statistics.median(ours), statistics.median(theirs)
    print(f"   gradci {o * 1e3:8.1f} ms   gradcheck {t * 1e3:8.1f} ms   ratio {o / t:5.2f}")


if __name__ == "__main__":
    big = mlp_100k()
    from gradci.scenarios.library import default

    small = next(s for s in default() if s.name.startswith("nn/chain") and s.operator == "gradient")
    overhead(small)
    overhead(big)
    against_gradcheck(big)
