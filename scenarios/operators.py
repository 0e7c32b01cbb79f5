"""The derivative operators gradci checks, and what each expects of its input.

Conventions follow DifferentiationInterface:

| operator            | input x            | f(x)          | tangent        | result                      |
| ------------------- | ------------------ | ------------- | -------------- | --------------------------- |
| derivative          | scalar             | any array     | -              | like f(x)                   |
| second_derivative   | scalar             | any array     | -              | like f(x)                   |
| gradient            | array or pytree    | scalar        | -              | like x                      |
| value_and_gradient  | array or pytree    | scalar        | -              | (f(x), like x)              |
| jacobian            | array              | array         | -              | f(x).shape + x.shape        |
| jvp                 | array or pytree    | array/pytree  | like x         | like f(x)                   |
| vjp                 | array or pytree    | array/pytree  | like f(x)      | like x                      |
| hvp                 | array or pytree    | scalar        | like x         | like x                      |
| hessian             | array              | scalar        | -              | x.shape + x.shape           |
"""
from __future__ import annotations

from typing import Any

import numpy as np
import optree

OPERATORS: tuple[str, ...] = (
    "derivative",
    "second_derivative",
    "gradient",
    "value_and_gradient",
    "jacobian",
    "jvp",
    "vjp",
    "hvp",
    "hessian",
)

SCALAR_INPUT = frozenset({"derivative", "second_derivative"})
ARRAY_INPUT = frozenset({"jacobian", "hessian"})
SCALAR_OUTPUT = frozenset({"gradient", "value_and_gradient", "hvp", "hessian"})
TAKES_TANGENT = frozenset({"jvp", "hvp"})
TAKES_COTANGENT = frozenset({"vjp"})


def check_operator_input(operator: str, x: Any, name: str) -> None:
    """Reject inputs the operator is not defined for, at construction time rather than mid-run."""
    if operator in SCALAR_INPUT and not (isinstance(x, np.ndarray) and x.ndim == 0):
        raise ValueError(f"scenario {name!r}: {operator} needs a scalar input")
    if operator in ARRAY_INPUT and not isinstance(x, np.ndarray):
        raise ValueError(f"scenario {name!r}: {operator} needs a single array input, not a pytree")
    leaves = optree.tree_leaves(x, none_is_leaf=True)
    if not leaves or not all(isinstance(leaf, np.ndarray) for leaf in leaves):
        raise ValueError(f"scenario {name!r}: x must be a float array or a pytree of them")
