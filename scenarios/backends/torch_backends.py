"""torch-rev (torch.autograd), torch-func-rev and torch-func-fwd (torch.func)."""
from __future__ import annotations

import functools
from typing import Any

import optree

from scenarios.backends.framework_backend import FrameworkBackend
from scenarios.backends.functional import TABLES, Transforms


def _torch_ravel(tree: Any):
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
        grad=tf.grad, value_and_grad=value_and_grad, jacrev=tf.jacrev, jacfwd=tf.jacfwd,
        jvp=tf.jvp, vjp=tf.vjp, ravel=_torch_ravel,
        ones_like=lambda tree: optree.tree_map(torch.ones_like, tree),
        zeros_like=lambda tree: optree.tree_map(torch.zeros_like, tree),
    )


class TorchFuncBackend(FrameworkBackend):
    framework = "torch"

    def __init__(self, name: str, mode: str):
        self.name, self.mode = name, mode

    def operator_fn(self, operator, f, x, tangent):
        return TABLES[self.mode][operator](torch_func_transforms(), f, x, tangent)


def _tensor_or_tuple(tree: Any) -> Any:
    """torch.autograd.functional speaks in a tensor or a tuple of tensors: a lone leaf stays a tensor."""
    leaves, structure = optree.tree_flatten(tree, none_is_leaf=True)
    return leaves[0] if structure.is_leaf() else tuple(leaves)


class TorchAutogradBackend(FrameworkBackend):
    """torch.autograd as most training code uses it: leaves with requires_grad and ``.grad``-style
    reverse passes. Pytrees go through torch.autograd.functional as flat tuples of tensors."""

    name, framework, mode = "torch-rev", "torch", "reverse"
    requires_grad = True

    def operator_fn(self, operator, f, x, tangent):
        import torch
        from torch.autograd import functional as F

        leaves, spec = optree.tree_flatten(x, none_is_leaf=True)
        out_spec: list = []

        def flat_f(*flat_leaves):
            out = f(optree.tree_unflatten(spec, list(flat_leaves)))
            out_spec[:] = [optree.tree_structure(out, none_is_leaf=True)]
            return _tensor_or_tuple(out)

        def like_x(values):
            values = values if isinstance(values, tuple) else (values,)
            return optree.tree_unflatten(spec, [v.detach() for v in values])

        def like_y(values):
            values = values if isinstance(values, tuple) else (values,)
            return optree.tree_unflatten(out_spec[0], [v.detach() for v in values])


        if operator in ("gradient", "value_and_gradient"):
            value = f(x)
            gradient = like_x(torch.autograd.grad(value, leaves))
            return (value.detach(), gradient) if operator == "value_and_gradient" else gradient
        if operator in ("derivative", "jacobian"):
            return F.jacobian(f, x)
        if operator == "second_derivative":
            return F.jacobian(lambda z: F.jacobian(f, z, create_graph=True), x)
        if operator == "hessian":
            return F.hessian(f, x)
        if operator == "jvp":
            return like_y(F.jvp(flat_f, tuple(leaves), tuple(optree.tree_leaves(tangent)))[1])
        if operator == "vjp":
            return like_x(F.vjp(flat_f, tuple(leaves), _tensor_or_tuple(tangent))[1])
        if operator == "hvp":
            return like_x(F.hvp(flat_f, tuple(leaves), tuple(optree.tree_leaves(tangent)))[1])
        raise ValueError(f"unknown operator {operator!r}")


def torch_backends() -> list[FrameworkBackend]:
    return [
        TorchAutogradBackend(),
        TorchFuncBackend("torch-func-rev", "reverse"),
        TorchFuncBackend("torch-func-fwd", "forward"),
    ]
