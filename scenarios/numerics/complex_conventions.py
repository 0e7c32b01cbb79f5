"""Each framework's convention for derivatives with respect to complex x, and how a cell reads it.

The reference differentiates f as a real map of (Re z, Im z) (``gradci.scenarios.numerics.complex_parts``):
its gradient of a real L is (∂L/∂a, ∂L/∂b) for z = a + ib, its JVP the real-linear pushforward, its VJP
the transpose of the real Jacobian. The frameworks answer in complex numbers, and not alike (checked
against the installed versions by ``tests/engine/test_complex.py``):

- torch (torch.autograd, torch.func): the gradient of a real L is ∂L/∂a + i ∂L/∂b, the conjugate
  Wirtinger derivative times 2; a VJP takes the cotangent ∂L/∂Re y + i ∂L/∂Im y, so that for a
  holomorphic f, ``vjp(ct) = ct · conj(f'(z))``.
  https://docs.pytorch.org/docs/stable/notes/autograd.html#autograd-for-complex-numbers
- jax: ``grad`` of a real L is ∂L/∂a − i ∂L/∂b, the conjugate of torch's; ``vjp`` of a holomorphic f is
  ``ct · f'(z)``: jax's reverse mode is torch's with every complex cotangent and result conjugated.
  https://docs.jax.dev/en/latest/notebooks/autodiff_cookbook.html#complex-numbers-and-differentiation
- a JVP with a complex tangent is the real-linear pushforward in both.

A cell hands the framework complex x (and complex tangents), takes f's complex outputs apart into
pairs inside the differentiated function (so every cotangent the framework sees is real, and the
user's rules get the complex cotangents the framework makes of it), and reads a reverse-mode result
with respect to z in its framework's convention: torch's as it is, jax's conjugated. Where a framework
refuses complex inputs to a transform (jax.jacfwd, torch.func.jacfwd and jacrev), the cell
differentiates over (Re z, Im z) instead, f joining them into z inside, and says so.
"""
from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import optree

TORCH_DOC = "https://docs.pytorch.org/docs/stable/notes/autograd.html#autograd-for-complex-numbers"
JAX_DOC = "https://docs.jax.dev/en/latest/notebooks/autodiff_cookbook.html#complex-numbers-and-differentiation"


@dataclasses.dataclass(frozen=True)
class Convention:
    """How one framework's reverse-mode derivative with respect to a complex z reads as (∂/∂a, ∂/∂b)."""

    framework: str
    # Whether its reverse-mode result is ∂/∂a − i ∂/∂b (conjugated before it is compared).
    conjugated: bool
    # The gradient of a real L, in words, for the cell's record.
    gradient: str
    doc: str


CONVENTIONS = {
    "torch": Convention("torch", conjugated=False, gradient="∂L/∂Re z + i ∂L/∂Im z", doc=TORCH_DOC),
    "jax": Convention("jax", conjugated=True, gradient="∂L/∂Re z − i ∂L/∂Im z", doc=JAX_DOC),
}

# The transforms that refuse complex inputs, by (framework, definition): the operators built from
# them run over (Re z, Im z). jax.jacfwd and torch.func.jacfwd build every forward-mode operator but
# the jvp (``Operator.per_input_in_forward``); torch.func.jacrev builds torch-func-rev's Jacobian.
REFUSING = {
    ("jax", "forward"): "jax.jacfwd refuses complex inputs",
    ("torch", "forward"): "torch.func.jacfwd refuses complex inputs",
}
TORCH_FUNC_JACREV = "torch.func.jacrev refuses complex inputs"


def refusal(framework: str, definition: str, operator: str, per_input_in_forward: bool) -> str:
    """Why this cell differentiates over (Re z, Im z) rather than z, or "" where it takes z itself."""
    if definition == "forward" and per_input_in_forward:
        return REFUSING.get((framework, definition), "")
    if framework == "torch" and definition == "reverse" and operator == "jacobian":
        return TORCH_FUNC_JACREV
    return ""


def applied(framework: str, operator: str, over_pairs: str) -> str:
    """The convention a cell applied, in words, for its record."""
    if over_pairs:
        return f"complex x differentiated over (Re z, Im z), f joining them inside ({over_pairs})"
    if operator == "jvp":
        return "complex tangent pushed forward (the same in every framework)"
    convention = CONVENTIONS[framework]
    reading = "conjugated to compare" if convention.conjugated else "compared as it is"
    return f"{framework} convention: d/dz is {convention.gradient}, {reading} ({convention.doc})"


def read(framework: str, tree: Any, over_pairs: bool) -> Any:
    """A framework's numpy result in torch's convention: jax's reverse-mode results conjugated."""
    if over_pairs or not CONVENTIONS[framework].conjugated:
        return tree
    return optree.tree_map(lambda leaf: np.conj(leaf) if np.iscomplexobj(leaf) else leaf, tree, none_is_leaf=True)
