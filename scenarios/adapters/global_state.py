"""Framework state that lives in the process, not in a scenario.

Default dtypes, TF32 and matmul precision switches, ``jax.config`` flags, numpy's error state, global
random generators.

A scenario module that sets ``torch.set_default_dtype(torch.float64)`` at import, or a function that
turns TF32 on while it runs, would otherwise change the cells of every module checked after it.
So the engine captures this state, restores it between modules' scenarios, and names each change
on the cells of the module that made it (``gradci.scenarios.authoring.project`` for changes made at
import, ``gradci.scenarios.check`` for changes made while a scenario's cells ran).

Only frameworks already imported are read: capturing imports nothing.
"""
from __future__ import annotations

import hashlib
import random
import sys
from collections.abc import Callable
from typing import Any

# name -> (read, write, how to show a value); a value is compared with ==.
Setting = tuple[Callable[[], Any], Callable[[Any], object], Callable[[Any], str]]

# jax.config flags that change what a computation gives (not logging, caching or tracing aids).
JAX_FLAGS = ("jax_enable_x64", "jax_default_matmul_precision", "jax_numpy_rank_promotion",
             "jax_numpy_dtype_promotion", "jax_debug_nans", "jax_debug_infs", "jax_disable_jit",
             "jax_default_prng_impl", "jax_threefry_partitionable", "jax_enable_custom_prng",
             "jax_softmax_custom_jvp", "jax_random_seed_offset", "jax_legacy_prng_key")


class RandomState:
    """A global random generator's state, as its ``set_state`` takes it.

    ``identity`` is a value equal between two reads exactly when the states are (compared directly:
    hashing kilobytes of generator state at every read cost more than the rest of a capture). Shown by
    a digest of it.
    """

    __slots__ = ("state", "identity")

    def __init__(self, state: Any, identity: Any):
        self.state, self.identity = state, identity

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RandomState) and self.identity == other.identity

    def __repr__(self) -> str:
        return f"state {hashlib.sha256(repr(self.identity).encode()).hexdigest()[:12]}"


def _random_setting(read: Callable[[], RandomState], write: Callable[[Any], object]) -> Setting:
    return read, lambda value: write(value.state), repr


def _numpy_settings() -> dict[str, Setting]:
    import numpy as np

    def read_random() -> RandomState:
        state: Any = np.random.get_state(legacy=True)  # (name, keys, pos, has_gauss, cached_gaussian)
        return RandomState(state, (state[0], state[1].tobytes(), *state[2:]))

    return {
        "numpy error state (np.seterr)": (np.geterr, lambda value: np.seterr(**value), str),
        "numpy's global random state (np.random.seed)": _random_setting(read_random, np.random.set_state),
    }


def _python_settings() -> dict[str, Setting]:
    def read() -> RandomState:
        state = random.getstate()
        return RandomState(state, state)

    return {"Python's global random state (random.seed)": _random_setting(read, random.setstate)}


def _torch_settings() -> dict[str, Setting]:
    import torch

    def read_random() -> RandomState:
        state = torch.random.get_rng_state()
        return RandomState(state, state.numpy().tobytes())

    # The TF32 switches before the matmul precision: torch keeps its legacy switches and the
    # precision consistent only when they are written in the order a user writes them (a switch
    # after the precision would leave the two disagreeing, and torch then refuses to read either).
    settings: dict[str, Setting] = {
        "torch default dtype (torch.set_default_dtype)": (
            torch.get_default_dtype, torch.set_default_dtype, str),
        "torch TF32 matmuls (torch.backends.cuda.matmul.allow_tf32)": (
            lambda: torch.backends.cuda.matmul.allow_tf32,
            lambda value: setattr(torch.backends.cuda.matmul, "allow_tf32", value), str),
        "torch TF32 convolutions (torch.backends.cudnn.allow_tf32)": (
            lambda: torch.backends.cudnn.allow_tf32, lambda value: setattr(torch.backends.cudnn, "allow_tf32", value),
            str),
        "torch float32 matmul precision (torch.set_float32_matmul_precision)": (
            torch.get_float32_matmul_precision, torch.set_float32_matmul_precision, str),
        "torch deterministic algorithms (torch.use_deterministic_algorithms)": (
            torch.are_deterministic_algorithms_enabled, torch.use_deterministic_algorithms, str),
        "torch gradient mode (torch.set_grad_enabled)": (
            torch.is_grad_enabled, lambda value: torch.set_grad_enabled(value), str),
        "torch's global random state (torch.manual_seed)": _random_setting(read_random, torch.random.set_rng_state),
    }
    return settings


def _jax_settings() -> dict[str, Setting]:
    import jax

    def flag(name: str) -> Setting:
        return (lambda: jax.config.values.get(name), lambda value: jax.config.update(name, value), repr)

    return {f"jax.config {name}": flag(name) for name in JAX_FLAGS if name in jax.config.values}


_READERS = (("numpy", _numpy_settings), ("torch", _torch_settings), ("jax", _jax_settings))


def _settings() -> dict[str, Setting]:
    found = _python_settings()
    for module, settings in _READERS:
        if module in sys.modules:
            found.update(settings())
    return found


State = dict[str, Any]


def capture() -> State:
    """The state of every framework imported so far.

    Each framework is first configured as the engine runs it (jax's x64 on): a framework a user imported
    before the engine did must not make that configuration a change to undo.
    """
    _configure_imported()
    state = {}
    for name, (read, _, _) in _settings().items():
        try:
            state[name] = read()
        except Exception:  # noqa: BLE001 -- a setting this build lacks (no CUDA backend): not part of the state
            continue
    return state


def _configure_imported() -> None:
    from gradci.scenarios.adapters import FrameworkUnavailable, get_framework

    for name in ("torch", "jax"):
        if name in sys.modules:
            try:
                get_framework(name)
            except FrameworkUnavailable:
                continue


def changes(before: State, after: State) -> list[str]:
    """One line per setting that differs, saying what it was and what it became.

    A framework imported in between is no change (its settings were not there to compare).
    """
    shown = _settings()
    lines = []
    for name, value in after.items():
        if name in before and not _same(before[name], value):
            show = shown[name][2] if name in shown else str
            lines.append(f"{name} changed from {show(before[name])} to {show(value)}")
    return lines


def _same(a: Any, b: Any) -> bool:
    return bool(a == b)


def restore(state: State, current: State | None = None) -> None:
    """Put every setting of ``state`` back as it was.

    Only those that differ now are set. ``current`` is the state now, where the caller has just captured
    it.
    """
    current = capture() if current is None else current
    for name, (_, write, _) in _settings().items():
        # A setting that cannot be read now (torch refuses to read its precision once the switches
        # disagree) is written back all the same.
        if name in state and (name not in current or not _same(state[name], current[name])):
            write(state[name])
