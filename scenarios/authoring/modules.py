"""Models as scenarios, given as x or captured by f, in the cell's dtype.

A ``torch.nn.Module`` or an equinox module may be given as x, and f may capture modules.

- ``Scenario(..., f=loss, x=model)``, with ``loss(model, *contexts)``: x becomes the model's
  parameters (a dict by parameter name: torch's ``named_parameters``, equinox's leaf paths), and
  each evaluation calls ``loss`` on the model with those parameters in place (torch: in a copy's
  parameter slots, where they stay for the backward pass too; equinox through ``eqx.combine``), so
  every backend differentiates with respect to them and the reference perturbs them.
- A torch module that f captures (in its closure, defaults or the globals it names) follows the
  cell's dtype and device: gradci hands each cell a function bound to a copy of the module in that
  dtype, made once per dtype and device when the cell is prepared — never inside a transform,
  where ``Module.to`` fails. The float64 CPU copy serves the reference.

Frameworks are imported only when a scenario gives one of their modules.
"""
from __future__ import annotations

import copy
import types
from collections.abc import Callable
from typing import Any

import numpy as np

FLOAT64_CPU = ("float64", "cpu")


def _is_torch_module(obj: Any) -> bool:
    return any(kind.__name__ == "Module" and kind.__module__ == "torch.nn.modules.module"
               for kind in type(obj).__mro__)


def _is_equinox_module(obj: Any) -> bool:
    return any(kind.__name__ == "Module" and kind.__module__.startswith("equinox") for kind in type(obj).__mro__)


def is_module(obj: Any) -> bool:
    return _is_torch_module(obj) or _is_equinox_module(obj)


class ModuleAsInput:
    """A module given as x: its parameters as a dict of float64 arrays, and f rebound to take them."""

    def __init__(self, module: Any) -> None:
        self.module = module
        self.framework = "torch" if _is_torch_module(module) else "jax"
        if self.framework == "torch":
            self.parameters = {name: p.detach().cpu().double().numpy().copy()
                               for name, p in module.named_parameters() if p.requires_grad}
        else:
            import equinox as eqx
            import jax

            params, self._static = eqx.partition(module, eqx.is_inexact_array)
            paths, self._treedef = jax.tree_util.tree_flatten_with_path(params)
            self._names = [jax.tree_util.keystr(path) for path, _ in paths]
            self.parameters = {name: np.asarray(leaf, dtype=np.float64) for name, (_, leaf) in zip(self._names, paths)}
        if not self.parameters:
            raise ValueError("the module has no trainable floating-point parameters to differentiate")

    def bind(self, f: Callable) -> Callable:
        """``f(model, *contexts)`` as a function of the parameters: ``g(parameters, *contexts)``."""
        if self.framework == "torch":
            return _TorchBinding(self.module, f)
        import equinox as eqx
        import jax

        names, treedef, static = self._names, self._treedef, self._static

        def with_parameters(parameters: dict, *contexts: Any) -> Any:
            params = jax.tree_util.tree_unflatten(treedef, [parameters[name] for name in names])
            return f(eqx.combine(params, static), *contexts)

        return with_parameters


class _TorchBinding:
    """f(model, *contexts) on a copy of the model whose parameters *are* the given tensors.

    There is one copy per dtype and device. The tensors are put in the copy's parameter slots and stay
    there until the next call, so that a rule that runs the model again in its backward (an adjoint ODE
    solver, a checkpoint) or collects ``model.parameters()`` differentiates with respect to them too.
    torch.autograd, torch.func and dual numbers all see them as inputs.
    """

    def __init__(self, module: Any, f: Callable) -> None:
        self.module, self.f = module, f
        self._copies: dict[tuple[str, str], Any] = {}
        self.prepare(*FLOAT64_CPU)

    def prepare(self, dtype: str, device: str) -> None:
        """Make the copy for a cell's dtype and device now, outside any transform."""
        import torch

        key = (dtype, device)
        if key not in self._copies:
            self._copies[key] = copy.deepcopy(self.module).to(dtype=getattr(torch, dtype), device=device)

    def __call__(self, parameters: dict, *contexts: Any) -> Any:
        first = next(iter(parameters.values()))
        key = (str(first.dtype).removeprefix("torch."), "cpu" if first.device.type == "cpu" else str(first.device))
        self.prepare(*key)
        model = self._copies[key]
        for name, value in parameters.items():
            owner_name, _, leaf = name.rpartition(".")
            owner = model.get_submodule(owner_name) if owner_name else model
            owner._parameters[leaf] = value  # not a Parameter: the tensor itself, traced by whichever transform
        return self.f(model, *contexts)


class CapturedModules:
    """f with the torch modules it captures replaced by copies in a cell's dtype and device.

    The modules are those in its closure cells and defaults. There is one function per dtype and
    device, made when asked (outside transforms).
    """

    def __init__(self, f: types.FunctionType) -> None:
        self.f = f
        self._made: dict[tuple[str, str], Callable] = {}

    @staticmethod
    def found_in(f: Any) -> bool:
        return isinstance(f, types.FunctionType) and any(
            _is_torch_module(value) for value in (*_closure_values(f), *(f.__defaults__ or ()),
                                                  *_named_globals(f).values()))

    def for_cell(self, dtype: str, device: str) -> Callable:
        key = (dtype, device)
        if key not in self._made:
            self._made[key] = _rebound(self.f, lambda value: _module_copy(value, dtype, device))
        return self._made[key]


def _closure_values(f: types.FunctionType) -> list[Any]:
    values = []
    for cell in f.__closure__ or ():
        try:
            values.append(cell.cell_contents)
        except ValueError:  # an empty cell
            values.append(None)
    return values


def _named_globals(f: types.FunctionType) -> dict[str, Any]:
    """The globals f's code names (its own code, not the functions it calls)."""
    return {name: f.__globals__[name] for name in f.__code__.co_names if name in f.__globals__}


def _module_copy(value: Any, dtype: str, device: str) -> Any:
    if not _is_torch_module(value):
        return value
    import torch

    return copy.deepcopy(value).to(dtype=getattr(torch, dtype), device=device)


def _rebound(f: types.FunctionType, replace: Callable[[Any], Any]) -> Callable:
    """A copy of f with its closure cells, defaults and named globals passed through ``replace``.

    The new function has f's code. The globals are replaced in an overlay of f's own: the functions it
    calls still see theirs.
    """
    closure = tuple(types.CellType(replace(value)) for value in _closure_values(f)) if f.__closure__ else None
    defaults = tuple(replace(value) for value in f.__defaults__) if f.__defaults__ else None
    replaced = {name: replace(value) for name, value in _named_globals(f).items()}
    namespace = f.__globals__
    if any(replaced[name] is not namespace[name] for name in replaced):
        namespace = {**namespace, **replaced}
    g = types.FunctionType(f.__code__, namespace, f.__name__, defaults, closure)
    g.__kwdefaults__ = f.__kwdefaults__
    g.__qualname__, g.__module__, g.__doc__ = f.__qualname__, f.__module__, f.__doc__
    return g
