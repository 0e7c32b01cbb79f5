"""The torch backends: torch-rev (torch.autograd), torch-func-rev, torch-func-fwd, torch-func-rev-fwd (torch.func).

torch-fwd (dual numbers) is ``torch_dual``.
"""
from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import optree

from gradci.scenarios.backends.framework_backend import FrameworkBackend
from gradci.scenarios.backends.functional import apply_operator, composes
from gradci.scenarios.operators.records import OPERATOR_RECORDS
from gradci.scenarios.operators.vocabulary import Transforms


def torch_ravel(tree: Any):
    import torch

    leaves, spec = optree.tree_flatten(tree, none_is_leaf=True)
    shapes = [leaf.shape for leaf in leaves]
    sizes = [leaf.numel() for leaf in leaves]
    flat = torch.cat([leaf.reshape(-1) for leaf in leaves])

    def unravel(vector):
        parts = torch.split(vector, sizes)
        return optree.tree_unflatten(spec, [p.reshape(s) for p, s in zip(parts, shapes)])

    return flat, unravel


@functools.cache
def torch_func_transforms() -> Transforms:
    import torch
    import torch.func as tf

    def value_and_grad(f):
        def run(x):
            gradient, value = tf.grad_and_value(f)(x)
            return value, gradient
        return run

    return Transforms(
        name="torch.func", grad=tf.grad, value_and_grad=value_and_grad, jacrev=tf.jacrev,
        # jacfwd runs f under vmap, which refuses random ops by default: "same" draws one sample for
        # every tangent of the batch, as f's single evaluation in reverse mode and the reference do.
        jacfwd=functools.partial(tf.jacfwd, randomness="same"),
        jvp=tf.jvp, vjp=tf.vjp, ravel=torch_ravel,
        ones_like=lambda tree: optree.tree_map(torch.ones_like, tree),
        zeros_like=lambda tree: optree.tree_map(torch.zeros_like, tree),
        cast_like=lambda tree, like: optree.tree_map(lambda a, b: a.to(b.dtype), tree, like),
    )


# What makes the primal a torch transform returns differ from f(x): the Function (or code) answers
# otherwise when its input is differentiated (requires grad, is a dual number or a torch.func tensor).
TORCH_PRIMAL_CULPRIT = ("an autograd.Function (or code) whose forward answers otherwise when its input is "
                        "differentiated (ctx.needs_input_grad, requires_grad, a dual or torch.func tensor)?")


class TorchFuncBackend(FrameworkBackend):
    framework = "torch"
    primal_culprit = TORCH_PRIMAL_CULPRIT

    def __init__(self, name: str, mode: str, composition: str | None = None, composition_note: str = ""):
        self.name, self.mode = name, mode
        self.definition = composition or mode  # which of a record's compositions it runs
        self.composition_note = composition_note

    def computes(self, operator):
        return composes(self.definition, operator)

    def transforms(self):
        return torch_func_transforms()

    def operator_fn(self, operator, f, x, tangent):
        return apply_operator(torch_func_transforms(), self.definition, operator, f, x, tangent)


def _tensor_or_tuple(tree: Any) -> Any:
    """torch.autograd.functional speaks in a tensor or a tuple of tensors: a lone leaf stays a tensor."""
    leaves, structure = optree.tree_flatten(tree, none_is_leaf=True)
    return leaves[0] if structure.is_leaf() else tuple(leaves)


def _detached_tree(spec: Any, values: Any) -> Any:
    values = values if isinstance(values, tuple) else (values,)
    return optree.tree_unflatten(spec, [v.detach() for v in values])


def _blocks(row_spec: Any, column_spec: Any, rows: tuple) -> Any:
    """A tuple (over row leaves) of tuples (over column leaves) as a pytree of pytrees."""
    return optree.tree_unflatten(row_spec, [optree.tree_unflatten(column_spec, list(row)) for row in rows])


class _OfLeaves:
    """f as a function of x's leaves, remembering the structure of what it returns."""

    def __init__(self, f: Callable, x: Any):
        self.f = f
        leaves, self.in_spec = optree.tree_flatten(x, none_is_leaf=True)
        self.leaves = tuple(leaves)
        self.out_spec: optree.PyTreeSpec | None = None  # set by each call
        self.out: Any = None  # what the last call returned: f(x) as the transform computed it

    def __call__(self, *leaves):
        out = self.f(optree.tree_unflatten(self.in_spec, list(leaves)))
        self.out_spec = optree.tree_structure(out, none_is_leaf=True)
        self.out = out
        return _tensor_or_tuple(out)

    def value(self) -> Any:
        """f(x) from the last call, detached."""
        return optree.tree_map(lambda leaf: leaf.detach(), self.out, none_is_leaf=True)


class Autograd:
    """torch.autograd as the operator records' ``autograd`` functions use it, on pytrees.

    Results come back detached, with x's structure (or f(x)'s, for a jvp). Where torch computes f(x) on
    the way, a method answers (f(x), the derivative): ``torch.autograd.functional.jvp`` and ``vjp``
    return it, and grad of grad evaluates f once with the graph.
    """

    def __init__(self):
        from torch.autograd import functional

        self._functional = functional

    def jacobian(self, f: Callable, x: Any, create_graph: bool = False) -> Any:
        """The Jacobian in jax.jacrev's blocks (``gradci.scenarios.operators.blocks``).

        torch answers a tuple per output leaf of a tuple per input leaf, or one of the two tuples where
        the output is a lone tensor.
        """
        return self._jacobian(_OfLeaves(f, x), create_graph)

    def value_and_jacobian(self, f: Callable, x: Any) -> tuple[Any, Any]:
        """(f(x) as the Jacobian's one evaluation of f computed it, the Jacobian)."""
        g = _OfLeaves(f, x)
        jacobian = self._jacobian(g, create_graph=False)
        return g.value(), jacobian

    def _jacobian(self, g: _OfLeaves, create_graph: bool) -> Any:
        rows = self._functional.jacobian(g, g.leaves, create_graph=create_graph)
        assert g.out_spec is not None  # set as the jacobian called g
        return _blocks(g.out_spec, g.in_spec, (rows,) if g.out_spec.is_leaf() else rows)

    def hessian(self, f: Callable, x: Any) -> tuple[Any, Any]:
        """(f(x), the Hessian row by row, as grad of grad).

        The gradient with ``create_graph=True``, then one backward pass through it per element of x —
        what a Newton step or a gradient penalty runs.
        """
        import torch

        leaves, spec = optree.tree_flatten(x, none_is_leaf=True)
        value, gradient = self._gradient_with_graph(f, x, leaves)
        if self._constant(f, spec, leaves, gradient, _fixed_direction(leaves)):
            return value, _blocks(spec, spec, tuple(tuple(torch.zeros(leaf.shape + other.shape, dtype=leaf.dtype,
                                                                      device=leaf.device) for other in leaves)
                                                    for leaf in leaves))
        flat = torch.cat([g.reshape(-1) for g in gradient])
        rows = [torch.autograd.grad(flat[i], leaves, retain_graph=True, allow_unused=True, materialize_grads=True)
                for i in range(flat.numel())]
        blocks = []
        start = 0
        for leaf in leaves:
            count = leaf.numel()
            blocks.append(tuple(torch.stack([row[j] for row in rows[start:start + count]])
                                .reshape(leaf.shape + other.shape).detach() for j, other in enumerate(leaves)))
            start += count
        return value, _blocks(spec, spec, tuple(blocks))

    def grad(self, value: Any, x: Any) -> Any:
        """d value / d x by a backward pass from ``value``, computed from x's leaves (requires_grad)."""
        import torch

        leaves, spec = optree.tree_flatten(x, none_is_leaf=True)
        return _detached_tree(spec, torch.autograd.grad(value, leaves))

    def jvp(self, f: Callable, x: Any, t: Any) -> tuple[Any, Any]:
        g = _OfLeaves(f, x)
        value, pushed = self._functional.jvp(g, g.leaves, tuple(optree.tree_leaves(t)))
        return _detached_tree(g.out_spec, value), _detached_tree(g.out_spec, pushed)  # known once f has run

    def vjp(self, f: Callable, x: Any, ct: Any) -> tuple[Any, Any]:
        g = _OfLeaves(f, x)
        value, pulled = self._functional.vjp(g, g.leaves, _tensor_or_tuple(ct))
        return _detached_tree(g.out_spec, value), _detached_tree(g.in_spec, pulled)

    def hvp(self, f: Callable, x: Any, t: Any) -> tuple[Any, Any]:
        """(f(x), H·t as grad of grad).

        The gradient with ``create_graph=True``, then the gradient of its dot product with t.
        (``torch.autograd.functional.hvp`` takes another path, a double-backward trick through a
        vector-Hessian product, which can hide a NaN this one shows.)
        """
        import torch

        leaves, spec = optree.tree_flatten(x, none_is_leaf=True)
        value, gradient = self._gradient_with_graph(f, x, leaves)
        if self._constant(f, spec, leaves, gradient, optree.tree_leaves(t)):
            return value, _detached_tree(spec, tuple(torch.zeros_like(leaf) for leaf in leaves))
        product = sum(torch.sum(g * v) for g, v in zip(gradient, optree.tree_leaves(t)))
        pulled = torch.autograd.grad(product, leaves, allow_unused=True, materialize_grads=True)  # type: ignore[arg-type]  # sum() of tensors: typeshed says int | Tensor
        return value, _detached_tree(spec, pulled)

    @staticmethod
    def _gradient_with_graph(f: Callable, x: Any, leaves: list) -> tuple[Any, tuple]:
        """(f(x) detached, its gradient with the graph kept for a second backward pass)."""
        import torch

        value = f(x)
        return value.detach(), torch.autograd.grad(value, leaves, create_graph=True, allow_unused=True,
                                                   materialize_grads=True)

    def _constant(self, f: Callable, spec: Any, leaves: list, gradient: tuple, direction: list) -> bool:
        """Whether a gradient without a graph is constant near x: f linear or piecewise linear there.

        Its second derivatives are then exactly 0 (padding, average pooling, embeddings, margin
        losses). A gradient without a graph that does move with x was cut by its backward (``.detach()``,
        numpy, ``once_differentiable``): not constant, and the second backward pass says so. Told apart
        by the gradient a small step along ``direction`` away, one more backward pass where no graph
        is found, none otherwise.
        """
        import torch

        if any(g.requires_grad for g in gradient):
            return False
        with torch.no_grad():
            size = max([1.0, *(float(leaf.abs().max()) for leaf in leaves if leaf.numel())])
            reach = max([1e-30, *(float(d.abs().max()) for d in direction if d.numel())])
            shifted = [(leaf + (CONSTANCY_STEP * size / reach) * d.to(leaf)).requires_grad_()
                       for leaf, d in zip(leaves, direction)]
        moved = torch.autograd.grad(f(optree.tree_unflatten(spec, shifted)), shifted, allow_unused=True,
                                    materialize_grads=True)
        return all(_same_to_rounding(a, b) for a, b in zip(gradient, moved))


# How far (relative to x) the gradient is taken again to see whether it moves with x: far enough that a
# gradient that depends on x moves by far more than rounding, near enough that a piecewise-linear f
# keeps its piece.
CONSTANCY_STEP = 1e-4


def _fixed_direction(leaves: list) -> list:
    """A fixed pseudo-random direction like ``leaves``, for a Hessian's constancy test."""
    import torch

    generator = torch.Generator().manual_seed(0)
    return [torch.rand(leaf.shape, generator=generator, dtype=torch.float64) - 0.5 for leaf in leaves]


def _same_to_rounding(a: Any, b: Any) -> bool:
    import torch

    if a.numel() == 0:
        return True
    bound = 64 * torch.finfo(a.dtype).eps * max(1.0, float(a.abs().max()))
    return bool((a.detach() - b.detach()).abs().max() <= bound)


@functools.cache
def torch_autograd() -> Autograd:
    return Autograd()


class TorchAutogradBackend(FrameworkBackend):
    """torch.autograd as most training code uses it.

    Leaves with requires_grad and ``.grad``-style reverse passes. Pytrees go through
    torch.autograd.functional as flat tuples of tensors.
    """

    name, framework, mode = "torch-rev", "torch", "reverse"
    requires_grad = True
    definition = "autograd"
    primal_culprit = TORCH_PRIMAL_CULPRIT

    def operator_fn(self, operator, f, x, tangent):
        return OPERATOR_RECORDS[operator].autograd(torch_autograd(), f, x, tangent)


def torch_backends() -> list[FrameworkBackend]:
    return [
        TorchAutogradBackend(),
        TorchFuncBackend("torch-func-rev", "reverse"),
        TorchFuncBackend("torch-func-fwd", "forward"),
        # Second order as jacrev of jacfwd and vjp of jvp: forward-mode rules (an autograd.Function's
        # jvp) differentiated in reverse. Forward over reverse is torch-fwd's (dual numbers over
        # autograd). Second-order operators only; its mode is its outer derivative's.
        TorchFuncBackend("torch-func-rev-fwd", "reverse", composition="reverse-over-forward",
                         composition_note="reverse over forward (torch.func.jacrev of jacfwd, vjp of jvp): the "
                                          "forward-mode rules differentiated in reverse mode"),
    ]
