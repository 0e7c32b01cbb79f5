"""torch: pytrees of numpy float64 arrays in, numpy float64 out; devices and peak memory."""
from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any, cast

import numpy as np
import optree
import torch

from gradci.scenarios.adapters.adapter import INDEXING_KINDS, FrameworkAdapter
from gradci.scenarios.contract.devices import execution_device, simulated, simulated_device_missing
from gradci.scenarios.numerics.complex_parts import COMPLEX_DTYPES
from gradci.scenarios.numerics.precision import on_off

_DTYPES = {"float64": torch.float64, "float32": torch.float32,
           "float16": torch.float16, "bfloat16": torch.bfloat16}


def _matmul_tf32() -> bool:
    """cuBLAS's TF32 switch.

    torch's unannotated ``cuBLASModule.__getattr__`` reads to type checkers as returning bool | str
    (other attributes it serves are strings); ``allow_tf32`` is always a bool.
    """
    return cast(bool, torch.backends.cuda.matmul.allow_tf32)


def _complex_of(dtype: str) -> torch.dtype:
    """The complex dtype whose parts are ``dtype`` (complex64 where there is none: float16, bfloat16)."""
    return getattr(torch, COMPLEX_DTYPES.get(dtype, "complex64"))


class TorchAdapter(FrameworkAdapter):
    name = "torch"
    dtypes = _DTYPES
    version = torch.__version__

    def device_unavailable(self, device: str) -> str | None:
        """Why ``device`` cannot run here, or None."""
        if device == "cpu":
            return None
        if simulated(device):
            return simulated_device_missing(device)
        if not torch.cuda.is_available():
            return "CUDA is not available to torch on this machine"
        index = torch.device(device).index or 0
        if index >= torch.cuda.device_count():
            return f"{device} does not exist (torch sees {torch.cuda.device_count()} CUDA devices)"
        return None

    def to_framework(self, tree: Any, dtype: str, device: str, requires_grad: bool = False) -> Any:
        """Contiguous tensors of their own, never sharing the caller's memory.

        What the function writes or reads stays its own (``torch.as_tensor`` would share the memory, and
        keep a view's strides).
        """
        torch_dtype = _DTYPES[dtype]
        device = execution_device(device)

        def convert(leaf):
            if isinstance(leaf, np.ndarray) and leaf.dtype.kind in "fc":
                cast = torch_dtype if leaf.dtype.kind == "f" else _complex_of(dtype)
                tensor = torch.tensor(leaf, dtype=cast, device=device)
                return tensor.requires_grad_(True) if requires_grad else tensor
            if isinstance(leaf, np.ndarray) and leaf.dtype.kind in INDEXING_KINDS:
                return torch.tensor(leaf, device=device)  # an index array or mask: its own dtype, not cast
            if isinstance(leaf, np.ndarray):
                return leaf.copy()
            return leaf

        return optree.tree_map(convert, tree, none_is_leaf=True)

    def adopt(self, tree: Any) -> Any:
        def share(leaf):
            if isinstance(leaf, np.ndarray) and leaf.dtype == np.float64:
                return torch.from_numpy(leaf)
            return self.to_framework(leaf, "float64", "cpu")

        return optree.tree_map(share, tree, none_is_leaf=True)

    def to_numpy(self, tree: Any) -> Any:
        """float64 numpy; complex leaves (a derivative with respect to complex x) complex128."""
        def convert(leaf):
            if isinstance(leaf, torch.Tensor):
                wide = torch.complex128 if leaf.is_complex() else torch.float64
                # force: a ZeroTensor (torch's lazy zeros, e.g. the gradient of sgn) has no memory to share
                return leaf.detach().to(device="cpu", dtype=wide).numpy(force=True)
            return np.asarray(leaf, dtype=np.complex128 if np.iscomplexobj(leaf) else np.float64)

        return optree.tree_map(convert, tree, none_is_leaf=True)

    def value_dtypes(self, fn, x: Any) -> tuple[set[str], set[str]]:
        """(the dtypes f returns, the floating dtypes of every tensor an operation inside f made)."""
        from torch.utils._python_dispatch import TorchDispatchMode

        made: set[str] = set()

        class Recording(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                out = func(*args, **(kwargs or {}))
                made.update(str(leaf.dtype).removeprefix("torch.") for leaf in optree.tree_leaves(out)
                            if isinstance(leaf, torch.Tensor) and leaf.is_floating_point())
                return out

        with torch.no_grad(), Recording():
            out = fn(x)
        returned = {str(leaf.dtype).removeprefix("torch.") for leaf in optree.tree_leaves(out, none_is_leaf=True)
                    if isinstance(leaf, torch.Tensor)}
        return returned, made

    def fresh_copy(self, tree: Any) -> Any:
        """New tensors with the same values: declared state, reset before every evaluation."""
        return optree.tree_map(lambda leaf: leaf.clone() if isinstance(leaf, torch.Tensor) else leaf, tree,
                               none_is_leaf=True)

    def synchronize(self, device: str) -> None:
        if execution_device(device).startswith("cuda"):
            torch.cuda.synchronize(device)

    def reset_peak_memory(self, device: str) -> None:
        if execution_device(device).startswith("cuda"):
            torch.cuda.reset_peak_memory_stats(device)

    def peak_memory(self, device: str) -> int | None:
        if execution_device(device).startswith("cuda"):
            return int(torch.cuda.max_memory_allocated(device))
        return None

    def precision_text(self) -> str:
        return (f"torch tf32 matmul={on_off(_matmul_tf32())} "
                f"cudnn={on_off(torch.backends.cudnn.allow_tf32)} "
                f"fp32_matmul={torch.get_float32_matmul_precision()}")

    def tf32_active(self, device: str, dtype: str) -> bool:
        """TF32 happens only on a real GPU, only to float32, and only where a switch allows it."""
        return (dtype == "float32" and execution_device(device).startswith("cuda")
                and (_matmul_tf32() or torch.backends.cudnn.allow_tf32))

    @contextlib.contextmanager
    def pinned_precision(self, setting: str | None) -> Iterator[None]:
        if setting is None:
            yield
            return
        matmul, cudnn = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
        precision = torch.get_float32_matmul_precision()
        allowed = setting == "tf32"
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = allowed
        try:
            yield
        finally:  # the precision first: setting it also sets matmul.allow_tf32, restored after it
            torch.set_float32_matmul_precision(precision)
            torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = matmul, cudnn
