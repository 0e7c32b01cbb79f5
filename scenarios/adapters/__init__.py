"""Framework adapters: moving pytrees in and out of torch and jax, devices, dtypes, memory.

Imported lazily: asking for the torch adapter is what imports torch.
"""
from __future__ import annotations

import functools
import importlib

_ADAPTERS = {
    "torch": "gradci.scenarios.adapters.torch_adapter:TorchAdapter",
    "jax": "gradci.scenarios.adapters.jax_adapter:JaxAdapter",
}


class FrameworkUnavailable(RuntimeError):
    """The framework is not installed here: its cells are skipped, with this as the reason."""


@functools.cache
def get_framework(name: str):
    try:
        module_name, class_name = _ADAPTERS[name].split(":")
    except KeyError:
        raise ValueError(f"unknown framework {name!r}") from None
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:  # the adapter module imports the framework itself
        raise FrameworkUnavailable(f"{name} is not installed ({exc})") from None
    return getattr(module, class_name)()
