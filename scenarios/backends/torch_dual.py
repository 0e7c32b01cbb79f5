"""``torch-fwd``: forward mode through ``torch.autograd.forward_ad`` dual numbers.

This is the path training code and ``autograd.Function``'s ``jvp`` staticmethod take (``gradcheck``'s
``check_forward_ad``), which ``torch.func.jvp`` (``torch-func-fwd``) does not: torch.func refuses
old-style Functions, while dual numbers run them and call their ``jvp``. Every forward-capable
operator is built from dual-number JVPs, as ``torch-func-fwd`` builds them from ``torch.func.jvp``:
the operator records' ``forward`` definitions run against the ``Transforms`` below.

torch does not nest dual levels. A second-order operator (a JVP of a JVP, a Jacobian of a Jacobian)
takes its outer derivative by dual numbers and its inner one by reverse mode with
``create_graph=True`` — forward over reverse — and says so on the cell as a warning.
"""
from __future__ import annotations

import contextlib
import functools
import threading
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import optree

from gradci.scenarios.backends.framework_backend import FrameworkBackend
from gradci.scenarios.backends.functional import apply_operator
from gradci.scenarios.backends.torch_backends import TORCH_PRIMAL_CULPRIT, torch_ravel
from gradci.scenarios.operators.vocabulary import Transforms

NESTED_NOTE = ("torch-fwd: second order as forward over reverse — the outer derivative by dual numbers, "
               "the inner one by reverse mode (torch does not nest dual levels)")

_depth = threading.local()


@contextlib.contextmanager
def _dual_level() -> Iterator[None]:
    import torch.autograd.forward_ad as fwAD

    _depth.value = getattr(_depth, "value", 0) + 1
    try:
        with fwAD.dual_level():
            yield
    finally:
        _depth.value -= 1


def _nested() -> bool:
    return getattr(_depth, "value", 0) > 0


def _leaves(tree: Any) -> tuple[list[Any], Any]:
    return optree.tree_flatten(tree, none_is_leaf=True)


def dual_jvp(f: Callable, primals: tuple, tangents: tuple) -> tuple[Any, Any]:
    """(f(*primals), J·tangents) from one evaluation of f on dual numbers.

    A tangent torch drops (an output with no forward gradient) is zero: where it should not be, the
    comparison says so.
    """
    if _nested():
        warnings.warn(NESTED_NOTE, stacklevel=2)
        return _reverse_jvp(f, primals, tangents)
    import torch
    import torch.autograd.forward_ad as fwAD

    with _dual_level():
        duals = optree.tree_map(fwAD.make_dual, primals, tangents, none_is_leaf=True)  # type: ignore[arg-type]  # tuples of tensors are pytrees
        out = f(*duals)
        parts = [fwAD.unpack_dual(leaf) for leaf in _leaves(out)[0]]
        spec = _leaves(out)[1]
        primal = optree.tree_unflatten(spec, [p.primal for p in parts])
        tangent = optree.tree_unflatten(spec, [p.tangent if p.tangent is not None else torch.zeros_like(p.primal)
                                               for p in parts])
    return primal, tangent


def dual_jacfwd(f: Callable, has_aux: bool = False) -> Callable[[Any], Any]:
    """The Jacobian of f, column by column, one dual-number JVP per element of x.

    In ``jax.jacfwd``'s blocks (a pytree like f(x) whose leaves are pytrees like x).
    """

    def jacobian(x: Any) -> Any:
        if _nested():
            warnings.warn(NESTED_NOTE, stacklevel=2)
            return _reverse_jacobian(f, x, has_aux)
        import torch

        leaves, in_spec = _leaves(x)
        columns, out, aux = [], None, None
        for index, leaf in enumerate(leaves):
            for element in range(leaf.numel()):
                basis = [torch.zeros_like(other) for other in leaves]
                basis[index].view(-1)[element] = 1
                out, tangent = dual_jvp(f, (x,), (optree.tree_unflatten(in_spec, basis),))
                if has_aux:
                    out, aux = out
                    tangent = tangent[0]
                columns.append(tangent)
        if out is None:  # x has no elements: f still decides the result's structure (and gives the aux)
            out, aux = f(x) if has_aux else (f(x), None)
        jac = _blocks(out, leaves, in_spec, columns)
        return (jac, aux) if has_aux else jac

    return jacobian


def _blocks(out: Any, leaves: list[Any], in_spec: Any, columns: list[Any]) -> Any:
    """Columns (one tangent like f(x) per element of x) as blocks [out_i][x_j] of shape out_i.shape + x_j.shape."""
    import torch

    out_leaves, out_spec = _leaves(out)
    rows = []
    for i, out_leaf in enumerate(out_leaves):
        stacked = torch.stack([_leaves(column)[0][i] for column in columns], dim=-1) if columns else None
        blocks, start = [], 0
        for leaf in leaves:
            count = leaf.numel()
            part = (stacked[..., start:start + count] if stacked is not None
                    else out_leaf.new_zeros(out_leaf.shape + (0,)))
            blocks.append(part.reshape(out_leaf.shape + leaf.shape))
            start += count
        rows.append(optree.tree_unflatten(in_spec, blocks))
    return optree.tree_unflatten(out_spec, rows)


# -- the inner derivative of a second-order operator: reverse mode, differentiable by the outer duals ---
def _tracked(tree: Any) -> Any:
    def track(leaf):
        if leaf.requires_grad:
            return leaf
        return leaf.requires_grad_() if leaf.is_leaf else leaf.view_as(leaf).requires_grad_()
    return optree.tree_map(track, tree, none_is_leaf=True)


def _reverse_jvp(f: Callable, primals: tuple, tangents: tuple) -> tuple[Any, Any]:
    """J·t by reverse mode (the transpose of a vector-Jacobian product), keeping the graph."""
    import torch

    inputs = _tracked(primals)
    out = f(*inputs)
    out_leaves, out_spec = _leaves(out)
    dummies = [torch.zeros_like(leaf, requires_grad=True) for leaf in out_leaves]
    in_leaves = _leaves(inputs)[0]
    pulled = torch.autograd.grad(out_leaves, in_leaves, grad_outputs=dummies, create_graph=True, allow_unused=True)
    pulled_used = [(p, t) for p, t in zip(pulled, _leaves(tangents)[0]) if p is not None]
    if not pulled_used:
        return out, optree.tree_map(torch.zeros_like, out)
    pushed = torch.autograd.grad([p for p, _ in pulled_used], dummies, grad_outputs=[t for _, t in pulled_used],
                                 create_graph=True, allow_unused=True)
    return out, optree.tree_unflatten(out_spec, [p if p is not None else torch.zeros_like(o)
                                                 for p, o in zip(pushed, out_leaves)])


def _reverse_jacobian(f: Callable, x: Any, has_aux: bool) -> Any:
    """The Jacobian of f by one backward pass per output element, keeping the graph."""
    import torch

    tracked = _tracked(x)
    out = f(tracked)
    out, aux = out if has_aux else (out, None)
    out_leaves, out_spec = _leaves(out)
    in_leaves, in_spec = _leaves(tracked)
    rows = []
    for out_leaf in out_leaves:
        flat = out_leaf.reshape(-1)
        grads = [torch.autograd.grad(flat[i], in_leaves, retain_graph=True, create_graph=True, allow_unused=True)
                 for i in range(flat.numel())]
        blocks = []
        for j, leaf in enumerate(in_leaves):
            parts = [g[j] if g[j] is not None else torch.zeros_like(leaf) for g in grads]
            stacked = torch.stack(parts) if parts else leaf.new_zeros((0,) + leaf.shape)
            blocks.append(stacked.reshape(out_leaf.shape + leaf.shape))
        rows.append(optree.tree_unflatten(in_spec, blocks))
    jac = optree.tree_unflatten(out_spec, rows)
    return (jac, aux) if has_aux else jac


def _reverse_only(name: str) -> Callable[..., Any]:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"torch-fwd computes by dual numbers only; {name} is reverse mode")
    return refuse


@functools.cache
def dual_transforms() -> Transforms:
    import torch

    return Transforms(
        name="torch.autograd.forward_ad", grad=_reverse_only("grad"), value_and_grad=_reverse_only("value_and_grad"),
        jacrev=_reverse_only("jacrev"), vjp=_reverse_only("vjp"),
        jacfwd=dual_jacfwd, jvp=dual_jvp, ravel=torch_ravel,
        ones_like=lambda tree: optree.tree_map(torch.ones_like, tree),
        zeros_like=lambda tree: optree.tree_map(torch.zeros_like, tree),
        cast_like=lambda tree, like: optree.tree_map(lambda a, b: a.to(b.dtype), tree, like),
    )


class TorchDualBackend(FrameworkBackend):
    name, framework, mode = "torch-fwd", "torch", "forward"
    definition = "forward"
    primal_culprit = TORCH_PRIMAL_CULPRIT

    def transforms(self):
        return dual_transforms()

    def operator_fn(self, operator, f, x, tangent):
        return apply_operator(dual_transforms(), self.mode, operator, f, x, tangent)
