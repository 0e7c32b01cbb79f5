"""XLA settings that make the CPU compile a check's many small programs about twice as fast.

A check compiles hundreds of tiny programs (one per cell for jitted backends, and op by op one per
primitive × shape × dtype for ``jax-rev``) and runs each a few times, so compilation, not execution,
is what costs time: XLA's default CPU pipeline spent 80-160 ms on a lone primitive on 2 busy cores,
35-75 ms with these settings (README, "The demo and the whole library, cold"): the legacy CPU fusion
emitters do most of it, LLVM's O0 without its expensive passes some more. Both are XLA's own, ordinary
code paths; results are IEEE arithmetic either way (XLA enables no fast-math on the CPU by default),
so what a cell checks does not change; its steady-state time is that of less optimised machine code.

The O0 settings also govern XLA's GPU code generation, where they would slow kernels down, so they
apply only where no NVIDIA GPU is present. A flag the installed jaxlib lacks is left out (XLA would
abort). A user's own XLA_FLAGS come last and win (e.g.
``XLA_FLAGS=--xla_backend_optimization_level=2`` to time optimised code).
"""
from __future__ import annotations

import mmap
import os
from pathlib import Path

CPU_ONLY_FLAGS = ("--xla_cpu_use_fusion_emitters=false",)
NO_GPU_FLAGS = ("--xla_backend_optimization_level=0", "--xla_llvm_disable_expensive_passes=true")


def nvidia_gpu_present() -> bool:
    return os.path.exists("/dev/nvidiactl")


def fast_compile_flags(gpu_present: bool) -> tuple[str, ...]:
    return CPU_ONLY_FLAGS if gpu_present else CPU_ONLY_FLAGS + NO_GPU_FLAGS


def known_to_xla(flags: tuple[str, ...]) -> tuple[str, ...]:
    """The flags the installed jaxlib has.

    XLA aborts the process on an unknown one, and flags come and go between versions. Their names are
    looked up in jaxlib's library (mapped already by the import; a few tenths of a second); where that
    library is not found, none is assumed known.
    """
    import jaxlib

    for library in sorted(Path(jaxlib.__file__).parent.glob("libjax_common*.so*")):
        with open(library, "rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
            return tuple(flag for flag in flags if data.find(flag.removeprefix("--").split("=")[0].encode()) >= 0)
    return ()


def apply_fast_compile_flags(environ=os.environ) -> None:
    """Prepend the flags this jaxlib knows to XLA_FLAGS.

    XLA reads them when jax first compiles or creates its CPU client, so this runs before any jax array
    exists (where x64 is switched on).
    """
    ours = " ".join(known_to_xla(fast_compile_flags(nvidia_gpu_present())))
    if not ours:
        return
    theirs = environ.get("XLA_FLAGS", "")
    if ours not in theirs:  # idempotent: a module reloaded, or a child that inherited them
        environ["XLA_FLAGS"] = f"{ours} {theirs}".strip()
