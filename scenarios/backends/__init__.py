"""The backend registry.

Built-ins plus third-party backends from the ``gradci.backends`` entry-point group (each entry point
names a callable returning a Backend or a list of them).
"""
from __future__ import annotations

import functools
from importlib.metadata import entry_points

from gradci.scenarios.backends.base import Backend, CellSkipped, Prepared
from gradci.scenarios.backends.fd import fd_backends
from gradci.scenarios.backends.jax_backends import jax_backends
from gradci.scenarios.backends.sparse_backends import sparse_jax_backends
from gradci.scenarios.backends.torch_backends import torch_backends
from gradci.scenarios.backends.torch_dual import TorchDualBackend

ENTRY_POINT_GROUP = "gradci.backends"


def _builtin() -> list[Backend]:
    return [*jax_backends(), *sparse_jax_backends(), *torch_backends(), TorchDualBackend(), *fd_backends()]


def _from_entry_points() -> list[Backend]:
    found: list[Backend] = []
    for entry in entry_points(group=ENTRY_POINT_GROUP):
        made = entry.load()()
        found.extend(made if isinstance(made, (list, tuple)) else [made])
    return found


@functools.cache
def registry() -> dict[str, Backend]:
    backends: dict[str, Backend] = {}
    for backend in [*_builtin(), *_from_entry_points()]:
        if backend.name in backends:
            raise ValueError(f"two backends are named {backend.name!r}")
        if backend.vocabulary_error():
            raise ValueError(backend.vocabulary_error())
        backends[backend.name] = backend
    return backends


def get_backend(name: str) -> Backend:
    try:
        return registry()[name]
    except KeyError:
        raise ValueError(f"unknown backend {name!r}; known: {', '.join(registry())}") from None


def backend_names() -> tuple[str, ...]:
    return tuple(registry())


__all__ = ["Backend", "CellSkipped", "Prepared", "registry", "get_backend", "backend_names"]
