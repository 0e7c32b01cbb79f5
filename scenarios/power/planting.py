"""Plant a perturbation in one derivative method of a rule while a block runs, and restore it after.

The method's output is changed in one of its outputs (its ``output``-th leaf: a torch ``backward``'s
gradients in order, a ``jax.custom_vjp`` ``bwd``'s cotangent leaves, a ``jax.custom_jvp`` rule's
tangent leaves): ``scale`` multiplies its largest-magnitude entry by 1 + δ, ``sign`` flips that entry's
sign, ``drop`` zeroes it (a dropped term), ``transpose`` transposes a square matrix. Only functional
ops, so that a plant runs as well under ``vmap`` and ``jax.jit`` tracing as on concrete values.

Where the methods live, and so what is swapped:

- ``torch.autograd.Function``: the class's ``backward``, ``vjp`` or ``jvp`` staticmethod. torch looks
  them up on the class at each call (eager autograd, forward AD and ``torch.func`` alike).
- ``jax.custom_vjp``: its ``bwd`` attribute (an ``equinox.filter_custom_vjp``'s ``fn_bwd``);
  ``jax.custom_jvp``: its ``jvp`` attribute. jax reads them
  when it traces a call, so a trace made before the plant keeps the old rule: entering and leaving a
  plant clears jax's caches, the engine's kept programs and the project's own ``jax.jit`` functions
  (``Planted.clear``); the programs made under a plant are never run after it.
- ``jax.lax.custom_linear_solve``'s ``transpose_solve`` and ``custom_root``'s ``tangent_solve``: jax traces
  them when the call is made, into the same program as the primal's ``solve``, so the function itself is
  not swapped; the step of jax's rule that uses it is changed instead (``solver_uses``): the cotangent
  jax's transpose solves for with ``transpose_solve`` (reverse mode only), the tangent ``custom_root``'s
  rule solves for with ``tangent_solve`` (its entry chosen by the root, as for a ``custom_jvp``). The
  primal value is never changed.

``Planted`` counts, per cell (the engine's ``cell_lines`` hook names the running cell), how often the
plant ran and, where the values were concrete, whether it changed any: a cell the plant never reached
is "not planted", not "missed", and a plant that changed nothing (an all-zero output, a symmetric
matrix) is "no-op", not "missed". Under a plant in a jax rule each jax cell starts with jax's caches
cleared, so that it traces the planted rule itself rather than run another cell's program.

Nothing compiled under a plant is written to jax's persistent compilation cache: a planted program is
not the user's, and a later run (another checkout's, where the cache folder is shared) must not read
one back.
"""
from __future__ import annotations

import contextlib
import dataclasses
import sys
from collections import Counter
from collections.abc import Callable, Hashable, Iterator
from pathlib import Path
from typing import Any

from gradci.scenarios.rules.discovery import (
    CUSTOM_JVP,
    CUSTOM_LINEAR_SOLVE,
    CUSTOM_ROOT,
    CUSTOM_VJP,
    EQUINOX_VJP_ATTRIBUTES,
    JAX_KINDS,
    TORCH_FUNCTION,
    Rule,
    is_equinox_vjp,
    on_rule_made,
    project_jitted,
    rule_key,
)
from gradci.scenarios.rules.power import DROP, SCALE, TRANSPOSE
from gradci.scenarios.rules.solver_uses import TANGENT, SolverUse, on_solver_use, watch_jax_solvers
from gradci.scenarios.rules.solver_uses import TRANSPOSE as TRANSPOSE_STEP

PROBE = "probe"  # no change: learns the outputs' shapes
# The methods a plant swaps, per kind of rule; the attribute holding each. A solver's ``solve`` is not
# planted: it computes the primal value too, which the value check compares.
PLANTABLE = {TORCH_FUNCTION: ("backward", "vjp", "jvp"), CUSTOM_VJP: ("bwd",), CUSTOM_JVP: ("jvp",),
             CUSTOM_LINEAR_SOLVE: ("transpose_solve",), CUSTOM_ROOT: ("tangent_solve",)}
# The step of jax's solver rules that runs each planted method (``solver_uses``).
SOLVER_STEPS = {"transpose_solve": TRANSPOSE_STEP, "tangent_solve": TANGENT}
# Kinds whose planted method returns (primal out, tangent out): only the tangent is perturbed.
TANGENT_PAIRS = frozenset({CUSTOM_JVP, CUSTOM_ROOT})

CellKey = tuple[str, str, str, str]


@dataclasses.dataclass(frozen=True)
class Plant:
    """One perturbation: its kind, the output (leaf) it changes, and δ for ``scale``."""

    kind: str
    output: int = 0
    delta: float | None = None


@dataclasses.dataclass(frozen=True)
class OutputShape:
    """A leaf of a method's output as the probe saw it: its shape, and whether it is a floating array."""

    shape: tuple[int, ...]
    floating: bool

    @property
    def square(self) -> bool:
        return len(self.shape) == 2 and self.shape[0] == self.shape[1] > 1


class Planted:
    """A plant in place, and what it did per cell: how often it ran, whether it changed a value."""

    def __init__(self, plant: Plant, root: str | Path, kind_of_rule: str = "") -> None:
        self.plant, self.root, self.kind_of_rule = plant, root, kind_of_rule
        self.applied: Counter[CellKey] = Counter()
        self.changed: Counter[CellKey] = Counter()
        self.unchanged: Counter[CellKey] = Counter()
        self.outputs: list[OutputShape] = []
        self._cell: CellKey | None = None

    # The engine's rule-coverage hook (``gradci.scenarios.rules.tracing.tracing``): which cell runs.
    @contextlib.contextmanager
    def cell(self, key: CellKey, framework: str) -> Iterator[None]:
        if framework == "jax" and self.kind_of_rule in JAX_KINDS:
            # An earlier cell's trace (of a jax.jit the project keeps where no walk finds it, a dict of
            # kernels, say) would run here without the rule's Python: the plant would be in it, yet not
            # counted for this cell. Every jax cell traces anew, so each one runs the planted rule itself.
            clear(self.root, self.kind_of_rule)
        outer, self._cell = self._cell, key
        try:
            yield
        finally:
            self._cell = outer

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        yield

    def kept_program(self, key: Hashable, made: bool) -> None:
        pass

    def solver_used(self, use: SolverUse) -> None:
        pass

    def perturbed(self, out: Any, kind_of_rule: str) -> Any:
        """``out`` with the plant applied, counted for the running cell."""
        if self._cell is not None:
            self.applied[self._cell] += 1
        if kind_of_rule in TANGENT_PAIRS:  # (primal out, tangent out): only the tangent is the rule's derivative
            primal, tangent = out
            # jax transposes a custom_jvp rule for reverse mode: it must stay linear in the tangent, so the
            # entry changed is chosen by the primal output (an argmax of the tangent is not linear in it).
            return primal, self._perturbed_leaves(tangent, _jax_tree, _jax_tree(primal)[0])
        return self._perturbed_leaves(out, _jax_tree if kind_of_rule in JAX_KINDS else _torch_tree)

    def _perturbed_leaves(self, out: Any, tree: Callable[[Any], tuple[list[Any], Callable[[list[Any]], Any]]],
                          choosers: list[Any] | None = None) -> Any:
        leaves, rebuild = tree(out)
        if not self.outputs:
            self.outputs = [OutputShape(tuple(getattr(leaf, "shape", ())), _floating(leaf)) for leaf in leaves]
        index = self.plant.output
        if self.plant.kind == PROBE or index >= len(leaves) or not _floating(leaves[index]):
            return out
        old = leaves[index]
        chooser = choosers[index] if choosers is not None and index < len(choosers) else None
        if chooser is None or getattr(chooser, "shape", None) != getattr(old, "shape", None):
            chooser = old
        new = _perturb(old, self.plant, chooser)
        if self._cell is not None:
            same = _concretely_equal(old, new)
            if same is not None:
                (self.unchanged if same else self.changed)[self._cell] += 1
        leaves = [*leaves[:index], new, *leaves[index + 1:]]
        return rebuild(leaves)


@contextlib.contextmanager
def planted(objects: list[Any], kind_of_rule: str, method: str, plant: Plant, root: str | Path) -> Iterator[Planted]:
    """Swap ``method`` of the rule's live ``objects`` for one that perturbs its output, while the block runs."""
    state = Planted(plant, root, kind_of_rule)
    undo: list[Callable[[], None]] = []
    stop_watching: Callable[[], None] | None = None
    wanted = {rule_key(obj) for obj in objects} - {None}  # read before the swaps change the objects' code

    def plant_in_new(made: Any) -> None:  # the same rule made anew inside a call (jaxopt's custom_root)
        if rule_key(made) in wanted:
            undo.append(_swap(made, kind_of_rule, method, state))

    try:
        undo.append(_no_persistent_cache_writes())
        if kind_of_rule in (CUSTOM_LINEAR_SOLVE, CUSTOM_ROOT):
            watch_jax_solvers()
        for obj in objects:
            undo.append(_swap(obj, kind_of_rule, method, state))
        if kind_of_rule in (CUSTOM_VJP, CUSTOM_JVP):
            stop_watching = on_rule_made(plant_in_new)
        clear(root, kind_of_rule)
        yield state
    finally:
        if stop_watching is not None:
            stop_watching()
        for restore in reversed(undo):
            restore()
        clear(root, kind_of_rule)  # no program traced with the plant runs after it


def _no_persistent_cache_writes() -> Callable[[], None]:
    """Keep jax from writing the programs compiled from now on to its persistent cache; the undoing function.

    jax writes an executable only where its compile took at least ``min_compile_time_secs``: infinity
    writes none. Reading stays on: a key is a hash of the whole program, so a planted program never
    reads an entry of the user's own, and the unplanted parts (op-by-op primitives) keep their speed.
    """
    jax = sys.modules.get("jax")
    if jax is None:
        return lambda: None
    option = "jax_persistent_cache_min_compile_time_secs"
    before = getattr(jax.config, option)
    jax.config.update(option, float("inf"))
    return lambda: jax.config.update(option, before)


def clear(root: str | Path, kind_of_rule: str) -> None:
    """Forget every compiled program that may hold a trace of the rule: the next call traces it anew."""
    from gradci.scenarios.backends.framework_backend import PROGRAMS

    PROGRAMS.clear()
    jax = sys.modules.get("jax")
    if jax is not None and kind_of_rule in JAX_KINDS:
        for function in project_jitted(root):
            function.clear_cache()
        jax.clear_caches()  # a jitted function made anywhere else (a scenario's own closure) keeps its trace too


def _swap(obj: Any, kind_of_rule: str, method: str, state: Planted) -> Callable[[], None]:
    if kind_of_rule in (CUSTOM_LINEAR_SOLVE, CUSTOM_ROOT):
        return _in_solver_steps(obj, kind_of_rule, method, state)
    if kind_of_rule == TORCH_FUNCTION:
        entry = vars(obj).get(method)  # its own staticmethod, or None where inherited
        raw = next((klass.__dict__[method] for klass in obj.__mro__ if method in klass.__dict__), None)
        if isinstance(raw, classmethod):
            # entmax's backward is a classmethod of a base class reading its subclass's attributes
            # (cls.n_fwd_args): it must stay bound to the class torch calls it on, not to this one.
            function = raw.__func__

            def torch_planted_cls(cls: Any, *args: Any, **kwargs: Any) -> Any:
                return state.perturbed(function(cls, *args, **kwargs), kind_of_rule)

            setattr(obj, method, classmethod(torch_planted_cls))
        else:
            original = getattr(obj, method)  # the function itself, read through the class

            def torch_planted(*args: Any, **kwargs: Any) -> Any:
                return state.perturbed(original(*args, **kwargs), kind_of_rule)

            setattr(obj, method, staticmethod(torch_planted))

        def restore_torch() -> None:
            if entry is not None:
                setattr(obj, method, entry)
            else:  # inherited: the class's own entry goes, the base's shows again
                delattr(obj, method)
        return restore_torch
    attribute = EQUINOX_VJP_ATTRIBUTES[method] if is_equinox_vjp(obj) else method  # equinox reads fn_bwd per call
    original_rule = getattr(obj, attribute)

    def jax_planted(*args: Any, **kwargs: Any) -> Any:
        return state.perturbed(original_rule(*args, **kwargs), kind_of_rule)

    setattr(obj, attribute, jax_planted)
    return lambda: setattr(obj, attribute, original_rule)


def _in_solver_steps(rule: Rule, kind_of_rule: str, method: str, state: Planted) -> Callable[[], None]:
    """Perturb the output of each step of jax's solver rules that runs ``method`` of ``rule``; the undoing function.

    The step's function is told by the source jax recorded for it: the method's file under the plant's
    root, its first line and the parameter it was handed as.
    """
    target = rule.method(method)
    if target is None:
        return lambda: None
    file = str((Path(state.root) / target.file).resolve())
    step = SOLVER_STEPS[method]

    def planting(use: SolverUse, out: Any) -> Any:
        runs = use.runs
        if use.step != step or runs is None or (runs.file, runs.line, runs.role) != (file, target.first_line, method):
            return out
        return state.perturbed(out, kind_of_rule)

    return on_solver_use(planting)


def _torch_tree(out: Any) -> tuple[list[Any], Callable[[list[Any]], Any]]:
    """A torch method's outputs: one tensor, or a tuple (or list) of tensors and Nones."""
    if isinstance(out, (tuple, list)):
        kind = type(out)
        return list(out), lambda leaves: kind(leaves)
    return [out], lambda leaves: leaves[0]


def _jax_tree(out: Any) -> tuple[list[Any], Callable[[list[Any]], Any]]:
    import jax

    leaves, treedef = jax.tree_util.tree_flatten(out)
    return leaves, lambda new: jax.tree_util.tree_unflatten(treedef, new)


def _floating(leaf: Any) -> bool:
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(leaf, torch.Tensor):
        return leaf.is_floating_point() or leaf.is_complex()
    dtype = getattr(leaf, "dtype", None)
    if dtype is None:
        return False
    import numpy as np

    try:
        return bool(np.issubdtype(dtype, np.inexact))
    except TypeError:  # jax's float0, the cotangent of an integer input
        return False


def _perturb(leaf: Any, plant: Plant, chooser: Any = None) -> Any:
    """The leaf with the plant applied, by functional ops of its own framework.

    ``scale`` and ``sign`` change the entry where ``chooser`` (the leaf itself by default; a custom_jvp
    rule's primal output) is largest in magnitude: the result is linear in the leaf either way.
    """
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(leaf, torch.Tensor):
        ops: Any = _TorchOps(torch)
    else:
        import jax.numpy as jnp

        ops = _JaxOps(jnp)
    if plant.kind == DROP:
        return ops.zeros_like(leaf)
    if plant.kind == TRANSPOSE:
        return ops.transpose(leaf) if len(leaf.shape) == 2 and leaf.shape[0] == leaf.shape[1] else leaf
    # 1 at the chooser's largest entry, 0 elsewhere, in the leaf's dtype (a tangent's may not be its primal's)
    mask = ops.largest_entry(leaf if chooser is None else chooser).astype(leaf.dtype) if not _is_torch(leaf) \
        else ops.largest_entry(leaf if chooser is None else chooser).to(leaf.dtype)
    factor = float(plant.delta or 0.0) if plant.kind == SCALE else -2.0  # sign: x - 2x = -x
    return leaf + factor * mask * leaf


class _TorchOps:
    def __init__(self, torch: Any) -> None:
        self.torch = torch

    def zeros_like(self, leaf: Any) -> Any:
        return self.torch.zeros_like(leaf)

    def transpose(self, leaf: Any) -> Any:
        return leaf.transpose(-2, -1)

    def largest_entry(self, leaf: Any) -> Any:
        flat = leaf.reshape(-1)
        positions = self.torch.arange(flat.shape[0], device=leaf.device)
        return (positions == flat.abs().argmax()).to(leaf.dtype).reshape(leaf.shape)


class _JaxOps:
    def __init__(self, jnp: Any) -> None:
        self.jnp = jnp

    def zeros_like(self, leaf: Any) -> Any:
        return self.jnp.zeros_like(leaf)

    def transpose(self, leaf: Any) -> Any:
        return self.jnp.swapaxes(leaf, -2, -1)

    def largest_entry(self, leaf: Any) -> Any:
        flat = self.jnp.reshape(leaf, (-1,))
        positions = self.jnp.arange(flat.shape[0])
        return (positions == self.jnp.argmax(self.jnp.abs(flat))).astype(leaf.dtype).reshape(leaf.shape)


def _is_torch(leaf: Any) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(leaf, torch.Tensor)


def _concretely_equal(old: Any, new: Any) -> bool | None:
    """Whether the plant left the values as they were; None where they are traced (jit, vmap)."""
    try:
        if hasattr(old, "equal") and hasattr(old, "requires_grad"):  # torch
            return bool(old.detach().equal(new.detach()))
        import numpy as np

        return bool(np.array_equal(np.asarray(old), np.asarray(new)))
    except Exception:  # a tracer or a batched tensor has no concrete value  # noqa: BLE001
        return None
