"""CPU–GPU agreement: a cuda cell's result against the CPU result of the same backend and dtype.

A wrong derivative in a CUDA kernel can hide inside the finite-difference tolerance of its dtype
(float32's is 2e-3 relative); next to the same computation on the CPU it cannot, because the two
may differ only by rounding (``gradci.scenarios.numerics.tolerances.AGREEMENT_TOLERANCES``). The comparison is
one more cell, keyed by the device ``cuda:N-vs-cpu`` (``gradci.scenarios.contract.devices.agreement_device``).
"""
from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import optree

from gradci.scenarios.numerics.tolerances import Tolerance, allowance
from gradci.scenarios.reference.flat_function import ravel


@dataclasses.dataclass(frozen=True)
class Agreement:
    ok: bool
    max_abs_err: float | None = None
    max_rel_err: float | None = None
    message: str = ""


def compare_with_cpu(gpu: Any, cpu: Any, tol: Tolerance) -> Agreement:
    """Compare a GPU result with the CPU's, elementwise.

    ``|gpu - cpu| <= atol * max(1, max|cpu|) + rtol * |cpu|``; NaN and infinities agree only where both
    sides have the same one.
    """
    gpu_spec, cpu_spec = (optree.tree_structure(tree, none_is_leaf=True) for tree in (gpu, cpu))
    if gpu_spec != cpu_spec:
        return Agreement(False, message=f"the GPU result is shaped {gpu_spec}, the CPU's {cpu_spec}")
    (gpu_flat, _), (cpu_flat, _) = ravel(gpu), ravel(cpu)
    if gpu_flat.shape != cpu_flat.shape:
        return Agreement(False, message=f"the GPU result has {gpu_flat.size} elements, the CPU's {cpu_flat.size}")
    finite = np.isfinite(gpu_flat) & np.isfinite(cpu_flat)
    same_special = ~finite & ((gpu_flat == cpu_flat) | (np.isnan(gpu_flat) & np.isnan(cpu_flat)))
    mismatched_special = int(np.count_nonzero(~finite & ~same_special))
    difference = np.abs(gpu_flat[finite] - cpu_flat[finite])
    magnitude = np.abs(cpu_flat[finite])
    scale = max(1.0, float(magnitude.max())) if magnitude.size else 1.0
    allowed = allowance(tol, magnitude, scale)
    over = int(np.count_nonzero(difference > allowed))
    max_abs = float(difference.max()) if difference.size else 0.0
    max_rel = float((difference / np.maximum(magnitude, np.finfo(np.float64).tiny)).max()) if difference.size else 0.0
    if mismatched_special:
        return Agreement(False, max_abs, max_rel, f"{mismatched_special} elements are NaN or infinite on one "
                                                  f"device only")
    if over:
        worst = int(np.argmax(difference - allowed))
        return Agreement(False, max_abs, max_rel,
                         f"GPU and CPU disagree in {over} of {difference.size} elements: max abs difference "
                         f"{max_abs:.3g} (element {worst}: {difference[worst]:.3g} > allowed {allowed[worst]:.3g})")
    return Agreement(True, max_abs, max_rel)
