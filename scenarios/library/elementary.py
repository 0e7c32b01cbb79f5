"""Number, vector and matrix functions across all nine operators, and the elementwise functions one by one.

The shapes follow DifferentiationInterfaceTest's default scenarios: every input kind (number, vector,
matrix) meets every output kind the operator allows, so a backend's reshaping and broadcasting of
tangents and cotangents is exercised as much as its derivative rules.
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np

from gradci.scenarios.authoring.expectations import Expect
from gradci.scenarios.authoring.namespace import namespace
from gradci.scenarios.authoring.scenario import Scenario
from gradci.scenarios.library._common import FUNCTIONAL_ON_EMPTY, derived, operator_tags, rng, scenario_name

FAMILY = "elementary"

# Which operators apply to an input kind -> output kind pair.
TO_NUMBER_FROM_NUMBER = ("derivative", "second_derivative", "gradient", "value_and_gradient", "jacobian",
                         "jvp", "vjp", "hvp", "hessian")
FROM_NUMBER = ("derivative", "second_derivative", "jacobian", "jvp", "vjp")
TO_NUMBER = ("gradient", "value_and_gradient", "hvp", "hessian", "jacobian", "jvp", "vjp")
ARRAY_TO_ARRAY = ("jacobian", "jvp", "vjp")


def num_to_num(x):
    xp = namespace(x)
    return xp.sin(x) * xp.exp(x / 2)


def num_to_vec(x):
    xp = namespace(x)
    return xp.stack([xp.sin(x), xp.cos(2 * x), x ** 3, xp.exp(-x)])


def num_to_mat(x):
    xp = namespace(x)
    return xp.reshape(num_to_vec(x), (2, 2))


def vec_to_num(x):
    xp = namespace(x)
    return xp.sum(x[:-1] * xp.sin(x[1:])) + xp.log(1 + xp.sum(x ** 2))


def mat_to_num(x):
    xp = namespace(x)
    return xp.sum(xp.tanh(x @ xp.matrix_transpose(x)))


def vec_to_vec(x):
    xp = namespace(x)
    return xp.concat([xp.sin(x), x * xp.cos(xp.flip(x))])


def vec_to_mat(x):
    xp = namespace(x)
    return xp.stack([xp.sin(x), x * xp.cos(x), xp.exp(-x)])


def mat_to_vec(x):
    xp = namespace(x)
    return xp.concat([xp.reshape(xp.sin(x), (-1,)), xp.sum(x ** 2, axis=0)])


def mat_to_mat(x):
    xp = namespace(x)
    return xp.matrix_transpose(x) @ xp.tanh(x)


# With constant data as context arguments: the variants module derives their closure twins.
def num_to_vec_scaled(x, v):
    xp = namespace(x)
    return xp.sin(x * v) + v * x ** 2


def vec_to_num_weighted(x, c):
    xp = namespace(x)
    return xp.sum(c * x ** 2) + xp.sum(xp.sin(c * x))


def vec_to_vec_affine(x, a, b):
    xp = namespace(x)
    return xp.tanh(a @ x + b)


def batch_to_num(x):
    xp = namespace(x)
    return xp.sum(xp.sin(x) * x) + xp.log(1 + xp.sum(x ** 2))


def batch_to_batch(x):
    xp = namespace(x)
    return xp.sin(x) * xp.exp(x / 2)


def mat_to_mat_sandwich(x, b, c):
    xp = namespace(x)
    return b @ xp.sin(x) @ c


SHAPES = {"number": (), "vector": (4,), "matrix": (2, 3)}

# (what, function, input kind, output kind, operators, context shapes)
FUNCTIONS = [
    ("num-to-num", num_to_num, "number", "number", TO_NUMBER_FROM_NUMBER, ()),
    ("num-to-vec", num_to_vec, "number", "vector", FROM_NUMBER, ()),
    ("num-to-mat", num_to_mat, "number", "matrix", FROM_NUMBER, ()),
    ("vec-to-num", vec_to_num, "vector", "number", TO_NUMBER, ()),
    ("mat-to-num", mat_to_num, "matrix", "number", TO_NUMBER, ()),
    ("vec-to-vec", vec_to_vec, "vector", "vector", ARRAY_TO_ARRAY, ()),
    ("vec-to-mat", vec_to_mat, "vector", "matrix", ARRAY_TO_ARRAY, ()),
    ("mat-to-vec", mat_to_vec, "matrix", "vector", ARRAY_TO_ARRAY, ()),
    ("mat-to-mat", mat_to_mat, "matrix", "matrix", ARRAY_TO_ARRAY, ()),
    ("num-to-vec-scaled", num_to_vec_scaled, "number", "vector", FROM_NUMBER, ((4,),)),
    ("vec-to-num-weighted", vec_to_num_weighted, "vector", "number", TO_NUMBER, ((4,),)),
    ("vec-to-vec-affine", vec_to_vec_affine, "vector", "vector", ARRAY_TO_ARRAY, ((3, 4), (3,))),
    ("mat-to-mat-sandwich", mat_to_mat_sandwich, "matrix", "matrix", ARRAY_TO_ARRAY, ((3, 2), (3, 4))),
]

# Edge shapes: an empty batch and a one-element vector through the vector functions. Real code gets
# empty batches; a rule that crashes on one, or answers in the wrong shape (a gradient of shape (1,)
# for x of shape (0,)), is a bug users hit. 0-d inputs are the number rows above.
EDGE_SHAPES = {"empty": (0,), "one": (1,)}
EDGE_FUNCTIONS = [
    ("batch-to-num", batch_to_num, TO_NUMBER),
    ("batch-to-batch", batch_to_batch, ARRAY_TO_ARRAY),
]
# torch's own functions that raise on an input with no elements: the cells say so as declared
# failures (of that exception only), and an xpass says when torch fixed them.
_VMAP_OVER_NOTHING = Expect(backend="torch-func-fwd", raises=(IndexError, RuntimeError),
                            reason="torch.func.jacfwd vmaps over x's elements, and torch's vmap does not "
                                   "support a dimension of size 0 (pytorch#46846)")
# The same vmap under reverse-over-forward (torch.func.jacrev of jacfwd).
_NESTED_VMAP_OVER_NOTHING = Expect(backend="torch-func-rev-fwd", raises=(IndexError, RuntimeError),
                                   reason=_VMAP_OVER_NOTHING.reason)
EMPTY_INPUT_BUGS = {
    **{("batch-to-num", op): [_VMAP_OVER_NOTHING]
       for op in ("gradient", "value_and_gradient", "hvp", "jacobian", "vjp")},
    ("batch-to-num", "hessian"): [_VMAP_OVER_NOTHING, _NESTED_VMAP_OVER_NOTHING, FUNCTIONAL_ON_EMPTY],
    ("batch-to-batch", "jacobian"): [FUNCTIONAL_ON_EMPTY, _VMAP_OVER_NOTHING],
    ("batch-to-batch", "vjp"): [_VMAP_OVER_NOTHING],
}

# Elementwise functions with input points inside their domains and away from kinks.
def _interval(low, high):
    return lambda g: g.uniform(low, high, size=5)


def _away_from_zero(g):
    return g.choice([-1.0, 1.0], size=5) * g.uniform(0.3, 1.5, size=5)


def _namespace_function(name: str) -> Callable:
    return lambda xp, x: getattr(xp, name)(x)


# Functions of the array-API namespace, each with the interval its input points are drawn from.
NAMESPACE_UNARY = (
    ("sin", (-2, 2)), ("cos", (-2, 2)), ("tan", (-1.2, 1.2)), ("exp", (-2, 2)), ("expm1", (-2, 2)),
    ("log", (0.2, 3)), ("log1p", (-0.8, 2)), ("log2", (0.2, 3)), ("log10", (0.2, 3)), ("sqrt", (0.2, 3)),
    ("tanh", (-2, 2)), ("sinh", (-2, 2)), ("cosh", (-2, 2)), ("asin", (-0.8, 0.8)), ("acos", (-0.8, 0.8)),
    ("atan", (-2, 2)), ("asinh", (-2, 2)), ("acosh", (1.2, 3)), ("atanh", (-0.8, 0.8)), ("square", (-2, 2)),
)
UNARY: list[tuple[str, Callable, Callable]] = [
    *((name, _namespace_function(name), _interval(*bounds)) for name, bounds in NAMESPACE_UNARY),
    ("abs", lambda xp, x: xp.abs(x), _away_from_zero),
    ("reciprocal", lambda xp, x: 1 / x, _away_from_zero),
    ("power", lambda xp, x: x ** 2.5, _interval(0.2, 3)),
    ("sigmoid", lambda xp, x: 1 / (1 + xp.exp(-x)), _interval(-3, 3)),
    ("softplus", lambda xp, x: xp.logaddexp(xp.zeros_like(x), x), _interval(-3, 3)),
    ("relu", lambda xp, x: xp.maximum(x, xp.zeros_like(x)), _away_from_zero),
    ("clip", lambda xp, x: xp.clip(x, -1.0, 1.0), _interval(-0.8, 0.8)),
    ("sign-times-square", lambda xp, x: xp.sign(x) * x ** 2, _away_from_zero),
]
UNARY_OPERATORS = ("gradient",)


def _positive_first_row(g):
    x = g.normal(size=(2, 5))
    x[0] = 0.3 + np.abs(x[0])
    return x


def _untied(g):
    x = g.normal(size=(2, 5))
    x[1] = x[0] + g.choice([-1.0, 1.0], size=5) * g.uniform(0.3, 1.0, size=5)
    return x


# Binary functions take the two rows of a (2, n) input; points avoid ties and domain edges.
BINARY: list[tuple[str, Callable, Callable]] = [
    ("atan2", lambda xp, a, b: xp.atan2(a, b), _untied),
    ("hypot", lambda xp, a, b: xp.hypot(a, b), lambda g: g.normal(size=(2, 5))),
    ("pow", lambda xp, a, b: a ** b, _positive_first_row),
    ("logaddexp", lambda xp, a, b: xp.logaddexp(a, b), lambda g: g.normal(size=(2, 5))),
    ("maximum", lambda xp, a, b: xp.maximum(a, b), _untied),
    ("minimum", lambda xp, a, b: xp.minimum(a, b), _untied),
    ("divide", lambda xp, a, b: a / b, lambda g: np.stack([g.normal(size=5), _away_from_zero(g)])),
    ("multiply", lambda xp, a, b: a * b, lambda g: g.normal(size=(2, 5))),
]


def _summed_unary(elementwise):
    def summed(x):
        return namespace(x).sum(elementwise(namespace(x), x))

    return derived(summed, elementwise)


def _summed_binary(elementwise):
    def summed(x):
        return namespace(x).sum(elementwise(namespace(x), x[0], x[1]))

    return derived(summed, elementwise)


def _shaped_functions() -> list[Scenario]:
    out = []
    for what, fn, kind_in, kind_out, operators, context_shapes in FUNCTIONS:
        g = rng(f"{FAMILY}/{what}")
        x = g.normal(size=SHAPES[kind_in]) * 0.8
        contexts = tuple(g.normal(size=shape) for shape in context_shapes)
        tags = (FAMILY, f"{kind_in}-to-{kind_out}") + (("contexts",) if contexts else ())
        out += [Scenario(name=scenario_name(FAMILY, what, op), operator=op, x=x, contexts=contexts,
                         f=fn,  # type: ignore[arg-type]  # the table's rows are tuples of mixed types
                         tags=tags + operator_tags(op))
                for op in operators]
    return out


def _edge_shapes() -> list[Scenario]:
    """The vector functions at an empty batch and at one element, every operator they allow."""
    out = []
    for size, shape in EDGE_SHAPES.items():
        for what, fn, operators in EDGE_FUNCTIONS:
            x = rng(f"{FAMILY}/{size}-{what}").normal(size=shape) * 0.8
            out += [Scenario(name=scenario_name(FAMILY, f"{size}-{what}", op), operator=op, f=fn, x=x,
                             xfail=EMPTY_INPUT_BUGS.get((what, op), []) if size == "empty" else [],
                             tags=(FAMILY, "edge-shape", f"{size}-input") + operator_tags(op))
                    for op in operators]
    return out


def _elementwise_functions() -> list[Scenario]:
    out = []
    for kind, table, wrap in (("unary", UNARY, _summed_unary), ("binary", BINARY, _summed_binary)):
        for what, elementwise, draw in table:
            x = draw(rng(f"{FAMILY}/{what}"))
            operators = UNARY_OPERATORS if kind == "unary" else ("gradient",)
            out += [Scenario(name=scenario_name(FAMILY, what, op), operator=op, f=wrap(elementwise), x=x,
                             tags=(FAMILY, kind) + operator_tags(op))
                    for op in operators]
    return out


def scenarios() -> list[Scenario]:
    return _shaped_functions() + _edge_shapes() + _elementwise_functions()
