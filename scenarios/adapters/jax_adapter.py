"""jax: pytrees in and out, devices, peak memory. float64 needs x64 on before any array exists."""
from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jax

from gradci.scenarios.adapters.xla_flags import apply_fast_compile_flags

jax.config.update("jax_enable_x64", True)
apply_fast_compile_flags()  # before any array exists, as x64


def _persistent_compilation_cache() -> None:
    """Keep XLA's compiled executables on disk.

    A check compiles hundreds of small programs (and, op by op, every primitive for every shape), and the
    next run of the same scenarios then skips most of that (measured here: op-by-op cells 2.6×, jitted
    cells 5× faster warm than cold). GRADCI_JAX_CACHE_DIR chooses the folder; "off" disables it.
    """
    where = os.environ.get("GRADCI_JAX_CACHE_DIR", str(Path.home() / ".cache" / "gradci" / "jax"))
    if where.lower() in ("", "off", "none", "0"):
        return
    jax.config.update("jax_compilation_cache_dir", where)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    if cap_mb := os.environ.get("GRADCI_JAX_CACHE_MAX_MB"):  # jax evicts the least recently used past it
        jax.config.update("jax_compilation_cache_max_size", int(cap_mb) << 20)


_persistent_compilation_cache()

import jax.numpy as jnp  # noqa: E402 - after x64 and the compile flags are set, on purpose
import numpy as np  # noqa: E402 - as above: no array may exist before x64 is on
import optree  # noqa: E402 - as above

from gradci.scenarios.adapters.adapter import INDEXING_KINDS, Compilations, FrameworkAdapter  # noqa: E402 - as above
from gradci.scenarios.contract.devices import execution_device, simulated, simulated_device_missing  # noqa: E402 - as above
from gradci.scenarios.numerics.complex_parts import COMPLEX_DTYPES  # noqa: E402 - as above


def _matmul_precision() -> str | None:
    return jax.config.jax_default_matmul_precision  # type: ignore[attr-defined]  # an option, set at runtime


_DTYPES = {"float64": jnp.float64, "float32": jnp.float32,
           "float16": jnp.float16, "bfloat16": jnp.bfloat16}


# jax.default_matmul_precision's names for scenarios.precision's pins.
PINS = {"highest": "highest", "tf32": "tensorfloat32"}
# Settings under which float32 matmuls keep float32's precision on a GPU (XLA's default there is TF32).
FULL_FLOAT32 = ("highest", "float32")


# jax.monitoring's events (jax/_src/dispatch.py names them): one each time jit traces a function to a
# jaxpr, and each time a jaxpr is lowered for the compiler. A lowering happens on every compile, the
# persistent compilation cache's hits included, so it counts what the cache cannot save.
TRACE_EVENT = "/jax/core/compile/jaxpr_trace_duration"
LOWERING_EVENT = "/jax/core/compile/jaxpr_to_mlir_module_duration"
_COUNTING: list[Compilations] = []  # the counts open now; the listener is registered once a process


def _count_event(event: str, duration_secs: float, **kwargs: Any) -> None:
    for counts in _COUNTING:
        if event == TRACE_EVENT:
            counts.traces += 1
        elif event == LOWERING_EVENT:
            counts.compiles += 1


@contextlib.contextmanager
def _counting_compilations() -> Iterator[Compilations]:
    if not getattr(_count_event, "registered", False):
        jax.monitoring.register_event_duration_secs_listener(_count_event)
        _count_event.registered = True  # type: ignore[attr-defined]  # a flag on the function, set once
    counts = Compilations()
    _COUNTING.append(counts)
    try:
        yield counts
    finally:
        _COUNTING.remove(counts)


def _device(device: str):
    device = execution_device(device)
    if device == "cpu":
        return jax.devices("cpu")[0]
    index = int(device.split(":")[1]) if ":" in device else 0
    return jax.devices("cuda")[index]


class JaxAdapter(FrameworkAdapter):
    name = "jax"
    dtypes = _DTYPES
    version = jax.__version__
    # value_dtypes traces f: its answer follows from f and the inputs' shapes and dtypes alone, so the
    # backends share it across their cells (and a scenario's operators) instead of tracing f for each.
    value_dtypes_traced = True

    def device_unavailable(self, device: str) -> str | None:
        if simulated(device):
            return simulated_device_missing(device)
        try:
            _device(device)
        except (RuntimeError, IndexError) as exc:
            return f"jax has no device {device} here ({str(exc).splitlines()[0][:120]})"
        return None

    def to_framework(self, tree: Any, dtype: str, device: str, requires_grad: bool = False) -> Any:
        target = _device(device)
        jax_dtype = _DTYPES[dtype]

        def convert(leaf):
            # A copy: on the CPU jax may otherwise alias the caller's numpy memory.
            if isinstance(leaf, np.ndarray) and leaf.dtype.kind == "f":
                return jax.device_put(jnp.array(leaf, dtype=jax_dtype, copy=True), target)
            if isinstance(leaf, np.ndarray) and leaf.dtype.kind == "c":  # parts of the cell's dtype
                complex_dtype = COMPLEX_DTYPES.get(dtype, "complex64")  # jax has no complex32
                return jax.device_put(jnp.array(leaf, dtype=complex_dtype, copy=True), target)
            if isinstance(leaf, np.ndarray) and leaf.dtype.kind in INDEXING_KINDS:
                return jax.device_put(jnp.array(leaf, copy=True), target)  # its own dtype, not cast
            if isinstance(leaf, np.ndarray):
                return leaf.copy()
            return leaf

        return optree.tree_map(convert, tree, none_is_leaf=True)

    def to_numpy(self, tree: Any) -> Any:
        """float64 numpy; complex leaves (a derivative with respect to complex x) complex128."""
        return optree.tree_map(lambda leaf: np.asarray(leaf, dtype=np.complex128 if np.iscomplexobj(leaf)
                                                       else np.float64), tree, none_is_leaf=True)

    def value_dtypes(self, fn, x: Any) -> tuple[set[str], set[str]]:
        """The dtypes f returns and those of the values made inside it, found by tracing.

        As a pair: the dtypes f returns, and the floating dtypes of every value an operation inside f
        made. Nothing runs or compiles.
        """
        closed = jax.make_jaxpr(fn)(x)
        returned = {str(var.aval.dtype) for var in closed.jaxpr.outvars}
        return returned, set(_floating_dtypes(closed.jaxpr))

    def counting_compilations(self):
        return _counting_compilations()

    def fresh_copy(self, tree: Any) -> Any:
        """jax arrays are immutable: state cannot change between evaluations."""
        return tree

    def synchronize(self, device: str) -> None:  # results are blocked on by the backend
        return None

    def reset_peak_memory(self, device: str) -> None:
        return None  # jax keeps a process-wide peak; reported as-is on accelerators

    def precision_text(self) -> str:
        return f"jax matmul={_matmul_precision() or 'default'}"

    def tf32_active(self, device: str, dtype: str) -> bool:
        return (dtype == "float32" and execution_device(device).startswith("cuda")
                and str(_matmul_precision()).lower() not in FULL_FLOAT32)

    def pinned_precision(self, setting: str | None):
        if setting is None:
            return contextlib.nullcontext()
        return jax.default_matmul_precision(PINS[setting])

    def peak_memory(self, device: str) -> int | None:
        if execution_device(device) == "cpu":
            return None
        stats = _device(device).memory_stats() or {}
        return stats.get("peak_bytes_in_use")


def _floating_dtypes(jaxpr: Any) -> Iterator[str]:
    """The floating dtypes of every equation's outputs, in nested jaxprs (scan, cond, pjit) too."""
    for eqn in jaxpr.eqns:
        for var in eqn.outvars:
            dtype = getattr(var.aval, "dtype", None)
            if dtype is not None and jax.numpy.issubdtype(dtype, jax.numpy.floating):
                yield str(dtype)
        for param in eqn.params.values():
            for inner in param if isinstance(param, (list, tuple)) else (param,):
                inner = getattr(inner, "jaxpr", inner)
                if hasattr(inner, "eqns"):
                    yield from _floating_dtypes(inner)
