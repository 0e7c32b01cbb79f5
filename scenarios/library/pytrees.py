"""Functions of dicts, lists, tuples and nested containers of arrays, and functions returning them.

Parameters of real models arrive as pytrees; a backend that flattens them in the wrong order, drops
a 0-d leaf or returns a list where a tuple went in is caught here rather than in the NN family,
where the cause would be harder to see.
"""
from __future__ import annotations

import numpy as np

from gradci.scenarios.authoring.namespace import namespace
from gradci.scenarios.authoring.scenario import Scenario
from gradci.scenarios.library._common import FUNCTIONAL_ON_EMPTY, operator_tags, rng, scenario_name

FAMILY = "pytree"
# jacobian and hessian of a pytree: jax.jacrev's blocks (scenarios.blocks), on every backend
SCALAR_OPERATORS = ("gradient", "value_and_gradient", "hvp", "hessian", "jvp", "vjp")
TREE_OPERATORS = ("jvp", "vjp", "jacobian")


def dict_to_num(params, inputs):
    xp = namespace(params)
    hidden = xp.tanh(inputs @ params["w"] + params["b"])
    return xp.sum(hidden ** 2) * xp.exp(params["s"])


def list_to_num(leaves):
    xp = namespace(leaves)
    a, b, c = leaves
    return xp.sum(xp.sin(b @ a)) + c * xp.sum(a ** 2) + xp.sum(xp.cos(b)) * c ** 2


def tuple_to_num(pair):
    xp = namespace(pair)
    u, v = pair
    return xp.log(1 + xp.sum(u ** 2)) * xp.sum(xp.tanh(v))


def nested_to_num(tree):
    xp = namespace(tree)
    hidden = xp.tanh(tree["encoder"]["w"] @ tree["inputs"][0] + tree["encoder"]["b"])
    return xp.sum(hidden * tree["inputs"][1]) * tree["scale"]


def tuple_to_tuple(pair):
    xp = namespace(pair)
    u, v = pair
    return (u * xp.sum(v), xp.sin(v) * u[0])


def nested_to_dict(tree):
    xp = namespace(tree)
    hidden = xp.tanh(tree["encoder"]["w"] @ tree["inputs"][0] + tree["encoder"]["b"])
    return {"hidden": hidden, "energy": xp.sum(hidden ** 2) * tree["scale"], "echo": tree["inputs"][1] ** 3}


def vec_to_dict(x):
    xp = namespace(x)
    return {"sin": xp.sin(x), "norm2": xp.sum(x ** 2), "outer": x[:, None] * x[None, :]}


def dict_to_list(params):
    xp = namespace(params)
    return [params["a"] * params["b"], xp.exp(params["a"]), xp.sum(params["b"] ** 2)]


def batch_and_weights_to_num(tree):
    xp = namespace(tree)
    batch, w = tree["batch"], tree["w"]
    return xp.sum(xp.tanh(batch)) * xp.sum(w) + xp.sum(xp.sin(w)) * (1 + xp.sum(batch ** 2))


def _draw_points():
    g = rng(FAMILY)
    nested = {
        "encoder": {"w": g.normal(size=(3, 2)), "b": g.normal(size=3)},
        "inputs": [g.normal(size=2), g.normal(size=3)],
        "scale": np.asarray(0.7),
    }
    return {
        "dict": ({"w": g.normal(size=(3, 2)) * 0.6, "b": g.normal(size=2), "s": np.asarray(0.3)},
                 (g.normal(size=(4, 3)),)),
        "list": ([g.normal(size=3), g.normal(size=(2, 3)) * 0.5, np.asarray(-0.4)], ()),
        "tuple": ((g.normal(size=3), g.normal(size=(2, 2))), ()),
        "nested": (nested, ()),
        "vector": (g.normal(size=3), ()),
        "pair-dict": ({"a": g.normal(size=4) * 0.5, "b": g.normal(size=4)}, ()),
        # an empty batch beside the weights: a leaf of no elements must keep its place and shape (0,)
        "with-empty": ({"batch": np.zeros(0), "w": g.normal(size=3)}, ()),
    }


# (what, function, input point key, operators)
FUNCTIONS = [
    ("dict-to-num", dict_to_num, "dict", SCALAR_OPERATORS),
    ("list-to-num", list_to_num, "list", SCALAR_OPERATORS),
    ("tuple-to-num", tuple_to_num, "tuple", ("gradient", "value_and_gradient", "hvp")),
    ("nested-to-num", nested_to_num, "nested", ("gradient", "value_and_gradient", "hvp")),
    ("tuple-to-tuple", tuple_to_tuple, "tuple", TREE_OPERATORS),
    ("nested-to-dict", nested_to_dict, "nested", TREE_OPERATORS),
    ("vec-to-dict", vec_to_dict, "vector", TREE_OPERATORS),
    ("dict-to-list", dict_to_list, "pair-dict", TREE_OPERATORS),
    ("empty-batch-to-num", batch_and_weights_to_num, "with-empty", SCALAR_OPERATORS + ("jacobian",)),
]


# Declared failures by (what, operator): torch bugs the scenarios meet.
XFAIL = {("empty-batch-to-num", "hessian"): [FUNCTIONAL_ON_EMPTY]}


def scenarios() -> list[Scenario]:
    points = _draw_points()
    out = []
    for what, fn, point, operators in FUNCTIONS:
        x, contexts = points[point]
        tags = (FAMILY,) + (("contexts",) if contexts else ())
        out += [Scenario(name=scenario_name(FAMILY, what, op), operator=op, x=x, contexts=contexts,
                         f=fn,  # type: ignore[arg-type]  # the table's rows are tuples of mixed types
                         xfail=XFAIL.get((what, op), []), tags=tags + operator_tags(op))
                for op in operators]
    return out
